"""Cost of reward normalization inside a fully jitted gymnax rollout.

``N`` vmapped gymnax environments take ``T`` steps under a uniformly random
policy, in one jitted ``lax.scan`` that keeps every step's reward (the
trajectory buffer a PPO update would read). Three versions of that rollout:

* ``bare``: the environments alone (``rewardnorm_jax.gymnax.VecEnv``);
* ``ours``: ``rewardnorm_jax.gymnax.NormalizeReward(VecEnv(env),
  semantics="purejaxrl")``, the library's gymnax wrapper;
* ``inline``: PureJaxRL's ``NormalizeVecReward`` arithmetic written inline in
  the rollout step (two-pass mean / variance, float32 count), on the same
  rewards and ``done = terminated | truncated``.

Both normalizers compute the same recurrence (PureJaxRL semantics); ours keeps
an exact count and carries rounding errors. Overheads are relative to
``bare``; times are the minimum over ``--repeats`` alternating calls (see
``_timing.py``).

Usage::

    python -m benchmarks.rollout                     # CartPole-v1, Pendulum-v1, 4096 x 500
    python -m benchmarks.rollout --envs 1024 --steps 100 --markdown
"""

import argparse
import functools

import gymnax
import jax
import jax.numpy as jnp

from benchmarks._timing import add_common_args, compare, print_results
from benchmarks.stream import GAMMA, inline_init, inline_step
from rewardnorm_jax.gymnax import NormalizeReward, VecEnv


def make_rollouts(env_name: str, num_envs: int, steps: int):
    """Jitted ``key -> rewards`` rollouts: ``bare``, ``ours`` and ``inline``."""
    env, params = gymnax.make(env_name)
    vec_env = VecEnv(env)
    wrapped = NormalizeReward(vec_env, GAMMA, semantics="purejaxrl")
    action_space = env.action_space(params)
    sample_actions = jax.vmap(action_space.sample)

    def rollout(step_fn, env_reset, extra_init):
        def run(key):
            reset_key, key = jax.random.split(key)
            _obs, state = env_reset(jax.random.split(reset_key, num_envs), params)

            def body(carry, key):
                state, extra = carry
                action_key, step_key = jax.random.split(key)
                actions = sample_actions(jax.random.split(action_key, num_envs))
                keys = jax.random.split(step_key, num_envs)
                reward, state, extra = step_fn(keys, state, actions, extra)
                return (state, extra), reward

            keys = jax.random.split(key, steps)
            return jax.lax.scan(body, (state, extra_init), keys)[1]

        return jax.jit(run)

    def bare_step(keys, state, actions, extra):
        _, state, reward, _, _, _ = vec_env.step(keys, state, actions, params)
        return reward, state, extra

    def ours_step(keys, state, actions, extra):
        _, state, reward, _, _, _ = wrapped.step(keys, state, actions, params)
        return reward, state, extra

    def inline_step_fn(keys, state, actions, norm_state):
        _, state, reward, terminated, truncated, _ = vec_env.step(keys, state, actions, params)
        reward, norm_state = inline_step(norm_state, reward, terminated | truncated)
        return reward, state, norm_state

    return {
        "bare": rollout(bare_step, vec_env.reset, ()),
        "ours": rollout(ours_step, wrapped.reset, ()),
        "inline": rollout(inline_step_fn, vec_env.reset, inline_init(num_envs)),
    }


def measure(env_name: str, num_envs: int, steps: int, repeats: int) -> dict:
    """Seconds per rollout of each version; checks the two normalizers agree."""
    rollouts = make_rollouts(env_name, num_envs, steps)
    key = jax.random.key(0)
    ours, inline = rollouts["ours"](key), rollouts["inline"](key)
    rel_err = float(jnp.max(jnp.abs(ours - inline) / jnp.maximum(jnp.abs(inline), 1e-3)))
    if not rel_err < 1e-2:
        raise AssertionError(f"ours differs from the inline normalizer: rel. error {rel_err}")
    times = compare({name: functools.partial(f, key) for name, f in rollouts.items()}, repeats)
    return times | {"rel_err": rel_err}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env-names",
        nargs="+",
        default=["CartPole-v1", "Pendulum-v1"],
        help="gymnax environment ids (default: CartPole-v1 Pendulum-v1)",
    )
    parser.add_argument(
        "--envs", type=int, default=4096, help="number of environments N (default 4096)"
    )
    parser.add_argument("--steps", type=int, default=500, help="rollout length T (default 500)")
    add_common_args(parser)
    args = parser.parse_args(argv)

    headers = [
        "environment",
        "bare ms",
        "ours ms",
        "inline ms",
        "ours overhead",
        "inline overhead",
        "ours added us/step",
        "inline added us/step",
        "ours/inline",
        "max rel. diff ours vs inline",
    ]
    rows = []
    for env_name in args.env_names:
        s = measure(env_name, args.envs, args.steps, args.repeats)
        rows.append(
            [
                env_name,
                s["bare"] * 1e3,
                s["ours"] * 1e3,
                s["inline"] * 1e3,
                f"{(s['ours'] / s['bare'] - 1) * 100:+.1f}%",
                f"{(s['inline'] / s['bare'] - 1) * 100:+.1f}%",
                f"{(s['ours'] - s['bare']) / args.steps * 1e6:+.2f}",
                f"{(s['inline'] - s['bare']) / args.steps * 1e6:+.2f}",
                s["ours"] / s["inline"],
                f"{s['rel_err']:.1e}",
            ]
        )
    print_results(
        f"gymnax rollout, {args.envs} envs x {args.steps} steps, random policy",
        headers,
        rows,
        args.markdown,
        packages=("jax", "jaxlib", "numpy", "gymnax"),
    )


if __name__ == "__main__":
    main()
