"""A plain float64 NumPy reference of the normalizers, written from SEMANTICS.md.

Deliberately independent of the library: loops and explicit branches, one
RunningMeanStd exactly as Gymnasium and Stable-Baselines3 write it.
"""

import numpy as np


class RunningMeanStd:
    """Gymnasium's ``RunningMeanStd`` (``gymnasium/wrappers/utils.py``), float64."""

    def __init__(self):
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def update(self, x):
        x = np.asarray(x, np.float64)
        if x.size == 0:
            return
        batch_mean, batch_var, batch_count = x.mean(), x.var(), x.size
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta**2 * self.count * batch_count / total
        )
        self.var, self.count = m2 / total, total


def normalize_stream(
    rewards,
    terminated,
    truncated,
    *,
    gamma=0.99,
    epsilon=1e-8,
    semantics="gymnasium",
    clip=None,
    update=None,
    active=None,
):
    """Normalized rewards, returns carried after each step, and final statistics.

    ``update`` is an optional (T,) boolean freeze schedule, ``active`` a (T, N) mask.
    Non-finite rewards follow the library's documented policy: skipped for the
    return (an episode boundary still resets it) and for the statistics, passed
    through unchanged.
    """
    rewards = np.asarray(rewards, np.float64)
    steps, num_envs = rewards.shape
    terminated = np.asarray(terminated, bool)
    truncated = np.asarray(truncated, bool)
    update = np.ones(steps, bool) if update is None else np.asarray(update, bool)
    active = np.ones_like(terminated) if active is None else np.asarray(active, bool)
    rms, ret = RunningMeanStd(), np.zeros(num_envs)
    outputs, returns = np.zeros_like(rewards), np.zeros_like(rewards)
    for t in range(steps):
        r, term, trunc, act = rewards[t], terminated[t], truncated[t], active[t]
        done = term | trunc
        finite = np.isfinite(r)
        valid = act & finite
        if semantics == "gymnasium":
            reset_before, reset_after, freeze_stops_return = term, np.zeros_like(term), False
        elif semantics == "gymnasium_same_step":
            reset_before, reset_after, freeze_stops_return = term, done, False
        elif semantics == "sb3":
            reset_before, reset_after, freeze_stops_return = np.zeros_like(term), done, True
        elif semantics == "purejaxrl":
            reset_before, reset_after, freeze_stops_return = done, np.zeros_like(term), False
        else:
            raise ValueError(semantics)
        new_ret = ret.copy()
        for i in range(num_envs):
            if not act[i]:
                continue
            carried = 0.0 if reset_before[i] else ret[i]
            new_ret[i] = carried * gamma + r[i] if valid[i] else carried
        if update[t]:
            rms.update(new_ret[valid])
        if freeze_stops_return and not update[t]:
            new_ret = ret  # SB3's training=False: the return does not accumulate
        ret = np.where(reset_after, 0.0, new_ret)  # SB3 zeroes done returns on every step
        returns[t] = ret
        with np.errstate(invalid="ignore"):
            scaled = r / np.sqrt(rms.var + epsilon)
        if clip is not None:
            scaled = np.clip(scaled, -clip, clip)
        outputs[t] = np.where(finite, scaled, r)
    return outputs, returns, rms


def sb3_test_stream(steps=3001):
    """SB3's ``test_obs_rms_vec_normalize`` reward stream: 2 envs, truncation every 4th step."""
    pattern = np.array([[1.0, 3.0], [3.0, 4.0], [4.0, 0.0], [0.0, 1.0]])
    t = np.arange(steps)
    rewards = pattern[t % 4]
    truncated = np.repeat((t % 4 == 3)[:, None], 2, axis=1)
    return rewards, np.zeros_like(truncated), truncated
