"""The library's gymnax wrapper against the reward normalizer PureJaxRL users copy.

PureJaxRL's ``NormalizeVecReward`` is a gymnax wrapper of about 20 lines that
keeps its statistics (mean, variance, float32 count) and the running returns
inside the environment state. ``Copied`` below is that design, transcribed:
the same state, and the same two-pass update (``stream.inline_step``). ``ours`` is
``rewardnorm_jax.gymnax.NormalizeReward(VecEnv(env), semantics="purejaxrl")``,
the same recurrence. Both run ``N`` environments for ``T`` steps under a
uniformly random policy, in one jitted ``lax.scan``, on the same keys:

* **equal**: the largest difference of the normalized rewards;
* **time**: milliseconds per rollout, side by side (``_timing.compare``);
* **one NaN**: the same rollout with one NaN reward (environment 0, step 10):
  how many of the following normalized rewards are NaN;
* **evaluation reset**: after the rollout, fresh environments for evaluation;
  the count their statistics start from (the copy's reset starts over from
  its prior, the library's ``stats_from`` keeps the learned statistics).

Usage::

    python -m benchmarks.purejaxrl_wrapper --markdown    # Pendulum-v1, 64 x 1000
"""

import argparse
import functools

import gymnax
import jax
import jax.numpy as jnp
from flax import struct

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, print_results
from benchmarks.stream import GAMMA, inline_init, inline_step
from rewardnorm_jax.gymnax import NormalizeReward, VecEnv, get_transform_state

NAN_STEP = 10


@struct.dataclass
class CopiedState:
    mean: jax.Array
    var: jax.Array
    count: jax.Array
    return_val: jax.Array
    env_state: object


class Copied:
    """PureJaxRL's ``NormalizeVecReward`` design: statistics inside the environment state."""

    def __init__(self, env: VecEnv, gamma: float):
        self._env = env
        self.gamma = gamma

    def reset(self, keys, params):
        obs, state = self._env.reset(keys, params)
        mean, var, count, return_val = inline_init(keys.shape[0])
        return obs, CopiedState(mean, var, count, return_val, state)

    def step(self, keys, state, action, params):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            keys, state.env_state, action, params
        )
        stats = (state.mean, state.var, state.count, state.return_val)
        reward, stats = inline_step(stats, reward, terminated | truncated, self.gamma)
        mean, var, count, return_val = stats
        state = CopiedState(mean, var, count, return_val, env_state)
        return obs, state, reward, terminated, truncated, info


def random_rollout(reset, step, env, params, num_envs: int, steps: int):
    """A jitted ``key -> (per-step outputs, final state)`` under a uniformly random policy.

    ``step(keys, state, actions)`` returns ``(state, output)``.
    """
    sample_actions = jax.vmap(env.action_space(params).sample)

    def run(key):
        reset_key, key = jax.random.split(key)
        _obs, state = reset(jax.random.split(reset_key, num_envs), params)

        def body(state, key):
            action_key, step_key = jax.random.split(key)
            actions = sample_actions(jax.random.split(action_key, num_envs))
            return step(jax.random.split(step_key, num_envs), state, actions)

        state, outputs = jax.lax.scan(body, state, jax.random.split(key, steps))
        return outputs, state

    return jax.jit(run)


def make_rollouts(env_name: str, num_envs: int, steps: int):
    """Jitted ``key -> (normalized rewards, final state)`` rollouts of ``ours`` and ``copied``."""
    env, params = gymnax.make(env_name)
    wrappers = {
        "ours": NormalizeReward(VecEnv(env), GAMMA, semantics="purejaxrl"),
        "copied": Copied(VecEnv(env), GAMMA),
    }

    def rollout(wrapper):
        def step(keys, state, actions):
            _, state, reward, _, _, _ = wrapper.step(keys, state, actions, params)
            return state, reward

        return random_rollout(wrapper.reset, step, env, params, num_envs, steps)

    return {name: rollout(wrapper) for name, wrapper in wrappers.items()}, wrappers, params


def measure(env_name: str, num_envs: int, steps: int, repeats: int) -> list:
    """The row of ``env_name``: equality, times, NaN outputs, evaluation counts."""
    rollouts, wrappers, params = make_rollouts(env_name, num_envs, steps)
    key = jax.random.key(0)
    (ours, ours_state), (copied, copied_state) = rollouts["ours"](key), rollouts["copied"](key)
    difference = float(jnp.max(jnp.abs(ours - copied)))
    times = compare({name: functools.partial(f, key) for name, f in rollouts.items()}, repeats)
    nan_ours, nan_copied = _nan_outputs(env_name, num_envs, steps)
    # Evaluation: fresh environments, as an evaluation loop resets them.
    eval_keys = jax.random.split(jax.random.key(1), num_envs)
    learned = get_transform_state(ours_state)
    _, eval_ours = wrappers["ours"].reset(eval_keys, params, stats_from=learned)
    _, eval_copied = wrappers["copied"].reset(eval_keys, params)
    return [
        env_name,
        f"{difference:.1e}",
        times["ours"] * 1e3,
        times["copied"] * 1e3,
        times["ours"] / times["copied"],
        f"{nan_ours} of {nan_copied[1]}",
        f"{nan_copied[0]} of {nan_copied[1]}",
        f"{int(rn.count_as_int(get_transform_state(eval_ours).stats))}",
        f"{float(eval_copied.count):.4g}",
        f"{int(rn.count_as_int(learned.stats))} / {float(copied_state.count):.6g}",
    ]


def _nan_outputs(env_name: str, num_envs: int, steps: int) -> tuple[int, tuple[int, int]]:
    """NaN normalized rewards after one NaN reward, for ours and the copy (and how many there are).

    The NaN enters as the reward of environment 0 at step ``NAN_STEP``: both
    normalizers see the same rewards, recorded from one rollout of the bare
    environments, through their own update functions.
    """
    env, params = gymnax.make(env_name)
    vec_env = VecEnv(env)

    def step(keys, state, actions):
        _, state, reward, terminated, truncated, _ = vec_env.step(keys, state, actions, params)
        return state, (reward, terminated, truncated)

    recorded = random_rollout(vec_env.reset, step, env, params, num_envs, steps)
    (rewards, terminated, truncated), _ = recorded(jax.random.key(2))
    rewards = rewards.at[NAN_STEP, 0].set(jnp.nan)
    norm = rn.normalize_reward(GAMMA, semantics="purejaxrl")

    def ours_body(state, xs):
        reward, state = norm.step(state, *xs)
        return state, reward

    def copied_body(stats, xs):
        reward, terminated, truncated = xs
        reward, stats = inline_step(stats, reward, terminated | truncated)
        return stats, reward

    xs = (rewards, terminated, truncated)
    ours = jax.lax.scan(ours_body, norm.init((num_envs,)), xs)[1]
    copied = jax.lax.scan(copied_body, inline_init(num_envs), xs)[1]
    after = slice(NAN_STEP + 1, None)  # the steps after the NaN reward
    total = int(ours[after].size)
    return int(jnp.isnan(ours[after]).sum()), (int(jnp.isnan(copied[after]).sum()), total)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-names", nargs="+", default=["Pendulum-v1"])
    parser.add_argument("--envs", type=int, default=64, help="environments N (default 64)")
    parser.add_argument("--steps", type=int, default=1000, help="rollout length T (default 1000)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    headers = [
        "environment",
        "max abs. difference",
        "ours ms",
        "copied ms",
        "ours/copied",
        "NaN after one NaN reward, ours",
        "NaN after one NaN reward, copied",
        "evaluation starts from count, ours",
        "evaluation starts from count, copied",
        "trained count, ours / copied",
    ]
    rows = [measure(name, args.envs, args.steps, args.repeats) for name in args.env_names]
    print_results(
        f"PureJaxRL's copied normalizer and the library, {args.envs} envs x {args.steps} steps",
        headers,
        rows,
        args.markdown,
        packages=("jax", "jaxlib", "numpy", "gymnax"),
    )


if __name__ == "__main__":
    main()
