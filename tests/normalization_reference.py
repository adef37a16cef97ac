"""Float64 NumPy transcriptions of the trainers' advantage normalizations with knobs.

Independent of the library: loops and explicit branches, as each trainer writes them.
Snapshots read:

- AReaL  inclusionAI/AReaL  4aef98d8d818af55b43621aaadba047ae10f4e77
         areal/utils/data.py (Normalization), areal/api/cli_args.py (NormConfig)
- ROLL   alibaba/ROLL       8eb27cc2dc34c4d1310b169d9b86d339004d811a
         roll/utils/functionals.py (reward_norm, RunningMoments),
         roll/pipeline/rlvr/rlvr_pipeline.py (one RunningMoments per domain, reward_postprocess
         called on each domain's part of the batch)
- SkyRL  NovaSky-AI/SkyRL   a9564572eb8e91076be43c1bd5e4615e3de17265
         skyrl/backends/skyrl_train/utils/ppo_utils.py (compute_maxrl_advantage)
- NeMo   NVIDIA-NeMo/RL     7ea279abfbeb698b092856d0dab61e7cf39bc909
         nemo_rl/algorithms/utils.py (calculate_baseline_and_std_per_prompt),
         nemo_rl/algorithms/advantage_estimator.py (GRPOAdvantageEstimator)
- verl   volcengine/verl    (compute_gpg_outcome_advantage's alpha = bsz / m.clamp(min=1))

Upstream computes in float32 (torch) or float64 (AReaL's high_precision); these are float64.
"""

import math

import numpy as np


def areal(x, group_size, mean_level, std_level, *, leave_one_out=False, unbiased=True, eps=1e-5):
    """``Normalization.__call__`` without a mask on one process (levels None as "none")."""
    x = np.asarray(x, np.float64)
    bs = x.size

    def compute_mean(xx, loo):
        factor, total = float(xx.size), xx.sum()
        if loo:
            if factor <= 1:
                return np.zeros_like(xx)
            return (total - xx) / (factor - 1)
        return np.full_like(xx, total / factor)

    def compute_std(xx, mean):
        factor, squares = float(xx.size), ((xx - mean) ** 2).sum()
        if unbiased:
            return 1.0 if factor <= 1 else np.sqrt(squares / (factor - 1))
        return np.sqrt(squares / factor)

    if mean_level == "batch":
        mean = compute_mean(x, leave_one_out)
    elif mean_level == "group":
        mean = np.zeros_like(x)
        for i in range(bs // group_size):
            s = slice(i * group_size, (i + 1) * group_size)
            if group_size == 1 and leave_one_out:
                mean[s] = 0.0
            else:
                mean[s] = compute_mean(x[s], leave_one_out)
    else:
        mean = np.zeros_like(x)
    centred = x - mean
    if std_level == "batch":
        std = np.full_like(x, compute_std(x, mean))
    elif std_level == "group":
        std = np.zeros_like(x)
        for i in range(bs // group_size):
            s = slice(i * group_size, (i + 1) * group_size)
            std[s] = 1.0 if group_size == 1 and unbiased else compute_std(x[s], mean[s])
    else:
        std, eps = np.ones_like(x), 0.0
    return centred / (std + eps)


class RunningMoments:
    """ROLL's ``RunningMoments``: prior count 1e-24, variance 1, unbiased std."""

    def __init__(self):
        self.mean, self.var, self.std, self.count = 0.0, 1.0, 1.0, 1e-24

    def update(self, xs):
        xs = np.asarray(xs, np.float64)
        xs_count = xs.size
        xs_var, xs_mean = xs.var(), xs.mean()
        delta = xs_mean - self.mean
        tot_count = self.count + xs_count
        new_sum = xs_var * xs_count
        old_sum = self.var * self.count + delta**2 * self.count * xs_count / tot_count
        self.mean += delta * xs_count / tot_count
        self.var = (old_sum + new_sum) / tot_count
        with np.errstate(divide="ignore", invalid="ignore"):
            self.std = np.sqrt(self.var * tot_count / (tot_count - 1))
        self.count = tot_count


def roll(rewards, n_sample, mean_type, std_type, running=None):
    """``reward_norm`` of one domain's rewards (types None as "none"); ``running`` its moments."""
    rewards = np.asarray(rewards, np.float64)
    grouped = rewards.reshape(-1, n_sample)
    if "running" in (mean_type, std_type):
        running.update(rewards)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = {
            "batch": rewards.mean(),
            "group": grouped.mean(axis=-1, keepdims=True),
            "running": running.mean if running else None,
            "none": 0.0,
        }[mean_type]
        std = {
            "batch": rewards.std(ddof=1) if rewards.size > 1 else np.nan,
            "group": grouped.std(axis=-1, ddof=1, keepdims=True) if n_sample > 1 else np.nan,
            "running": running.std if running else None,
            "none": None,
        }[std_type]
        # ROLL broadcasts a group std against the flat rewards unless the mean is the
        # group's (a (P, B) result): the intended per-group value is used here.
        out = grouped - mean if std is None else (grouped - mean) / (std + 1e-6)
    return out.reshape(rewards.shape)


def roll_stream(batches, domains, n_sample, mean_type, std_type, num_domains):
    """ROLL's pipeline over batches: each domain's part normalized with its own moments.

    ``reward_norm`` reads ``running_ctrl["domain"]``, a literal key the pipeline
    never sets (``self.running[domain]`` for each domain name): the intended
    ``running_ctrl[domain]`` is used.
    """
    running = [RunningMoments() for _ in range(num_domains)]
    outputs = []
    for rewards, ids in zip(batches, domains, strict=True):
        rewards, out = np.asarray(rewards, np.float64), np.zeros(len(rewards))
        for d in range(num_domains):
            idx = np.flatnonzero(ids == d)
            if idx.size:
                out[idx] = roll(rewards[idx], n_sample, mean_type, std_type, running[d])
        outputs.append(out)
    return outputs


def skyrl_maxrl(rewards, index, epsilon=1e-6):
    """``compute_maxrl_advantage``: (r - mean) / (mean + eps); a group of one keeps r - 0."""
    scores = np.asarray(rewards, np.float64).copy()
    groups: dict = {}
    for i, key in enumerate(index):
        groups.setdefault(key, []).append(scores[i])
    means = {k: (0.0 if len(v) == 1 else np.mean(v)) for k, v in groups.items()}
    out = scores.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, key in enumerate(index):
            if len(groups[key]) > 1:
                out[i] = (scores[i] - means[key]) / (means[key] + epsilon)
            else:
                out[i] = scores[i] - means[key]
    return out


def nemo_rloo_std(rewards, prompts, epsilon=1e-6, floor=0.0):
    """NeMo RL's GRPO advantage with ``use_leave_one_out_baseline`` and ``normalize_rewards``.

    ``calculate_baseline_and_std_per_prompt`` (every answer valid) and the zero-std
    skip of ``GRPOAdvantageEstimator``; ``floor`` > 0 is the guard ``std > floor``.
    """
    rewards = np.asarray(rewards, np.float64)
    baseline, std = np.zeros_like(rewards), np.zeros_like(rewards)
    for prompt in np.unique(prompts):
        idx = np.flatnonzero(prompts == prompt)
        n = idx.size
        if n <= 1:
            baseline[idx] = rewards[idx]
            continue
        mask = 1 - np.eye(n)
        num_valid = n - 1
        mean = mask @ rewards[idx] / num_valid
        square = mask @ rewards[idx] ** 2 / num_valid
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sqrt((square - mean**2) * (num_valid / (num_valid - 1)))
        baseline[idx], std[idx] = mean, np.nan_to_num(s, nan=0.0)
    advantages = rewards - baseline
    divided = std > floor
    advantages[divided] = advantages[divided] / (std[divided] + epsilon)
    return advantages


def leave_one_out_std(rewards, group_size):
    r"""``rloo_std`` (no epsilon) in float64, the others' mean and spread in two exact sums.

    :math:`(r_i - \bar r_{-i}) / \sigma_{-i}`, undivided where :math:`\sigma_{-i} = 0`;
    the others' mean, then their squared deviations from it, each by ``math.fsum``.
    """
    out = []
    for start in range(0, len(rewards), group_size):
        group = [float(r) for r in rewards[start : start + group_size]]
        for i, reward in enumerate(group):
            others = group[:i] + group[i + 1 :]
            mean = math.fsum(others) / len(others)
            std = math.sqrt(math.fsum((r - mean) ** 2 for r in others) / (len(others) - 1))
            out.append((reward - mean) / std if std > 0 else reward - mean)
    return np.array(out)


def verl_gpg_alpha(answers, nonzero):
    """The alpha of verl's ``bsz / m.clamp(min=1)``: torch's float32 reciprocal of m, times bsz."""
    return np.float32(answers) * (np.float32(1) / np.float32(max(nonzero, 1)))
