"""Brax PPO on normalized rewards against Brax's constant ``reward_scaling``, several seeds.

Brax's PPO multiplies every reward by a hand-tuned constant ``reward_scaling``
(Brax's learner defaults to 10; MuJoCo Playground's DM Control configs use 10).
This script trains Brax's own ``ppo.train`` on each environment with

* ``normalized``: ``wrap_env_fn=rewardnorm_jax.brax.wrap_env_fn(normalize_reward(
  gamma))`` with ``gamma`` the PPO discount, ``reward_scaling=1``;
* ``scale=c``: Brax's ``reward_scaling=c`` for each ``c`` of ``--scales``
  (default 0.1, 1, 10) and the environment config's own value (10 for both
  default environments, so that row is ``scale=10``),

with every other hyperparameter the same, for ``--seeds`` seeds each. Evaluation
is always on raw rewards (Brax's evaluator, ``eval/episode_reward``). It prints
one table row per environment and variant (final raw return and the mean over
the learning curve, as mean +- standard deviation over seeds; wall time) and
saves the learning curves as a PNG (``--plot``).

Environments (CPU-sized PPO settings, the same for every variant; 200-step episodes):

* ``inverted_pendulum`` (default): Brax's, positional backend; reward 1 per step balanced.
* ``inverted_double_pendulum`` (default): Brax's, positional backend; per step an alive
  bonus of 10 less distance and velocity penalties (a return below 2000).
* ``CartpoleBalance`` (``--envs``): MuJoCo Playground's DM Control task (``impl="jax"``,
  wrapped by ``wrap_for_brax_training``; 1000-step episodes in Playground), reward in [0, 1].
  Not in the default run: with CPU-sized settings neither ``normalized`` nor ``scale=10``
  raised its return within 40k-80k steps (one seed each, three settings tried).

Each variant runs in a fresh process: XLA:CPU keeps every compiled program mapped, and
dozens of trainers in one process ran out of memory. Brax's trainer compiles its programs
for every run (most of a run's time on a CPU).

Usage::

    python -m benchmarks.brax_scale --markdown                 # the recorded run
    python -m benchmarks.brax_scale --envs inverted_pendulum --seeds 1 --timesteps 2000
"""

import argparse
import concurrent.futures
import dataclasses
import functools
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks._timing import command_line, environment, markdown_table, plain_table

PACKAGES = ("jax", "jaxlib", "brax", "playground", "mujoco")


@dataclasses.dataclass(frozen=True)
class Task:
    """One environment and the PPO settings every variant trains it with."""

    load: Callable[[], Any]  # () -> (env, wrap); wrap is Brax's or Playground's wrapping
    config_scaling: float  # the reward_scaling its reference config uses
    config_source: str
    timesteps: int
    ppo: dict


def _brax_env(name: str):
    from brax import envs

    return envs.get_environment(name, backend="positional"), envs.training.wrap


def _playground_env(name: str):
    from mujoco_playground import registry, wrapper

    return registry.load(name, config_overrides={"impl": "jax"}), wrapper.wrap_for_brax_training


def _playground_scaling(name: str) -> float:
    from mujoco_playground.config import dm_control_suite_params

    return float(dm_control_suite_params.brax_ppo_config(name).reward_scaling)


COMMON = {
    "num_evals": 5,
    "num_envs": 32,
    "batch_size": 32,
    "num_minibatches": 4,
    "unroll_length": 10,
    "num_updates_per_batch": 4,
    "num_eval_envs": 16,
    "normalize_observations": True,
}


def _brax_task(name: str, timesteps: int) -> Task:
    """A Brax pendulum task: Brax's learner's default scale, one PPO configuration."""
    return Task(
        load=functools.partial(_brax_env, name),
        config_scaling=10.0,
        config_source="brax/training/learner.py --reward_scaling default",
        timesteps=timesteps,
        ppo={
            **COMMON,
            "episode_length": 200,
            "learning_rate": 3e-3,
            "entropy_cost": 1e-2,
            "discounting": 0.97,
        },
    )


TASKS = {
    "inverted_double_pendulum": _brax_task("inverted_double_pendulum", 50_000),
    "inverted_pendulum": _brax_task("inverted_pendulum", 30_000),
    "CartpoleBalance": Task(
        load=functools.partial(_playground_env, "CartpoleBalance"),
        config_scaling=10.0,  # checked against Playground's config at run time
        config_source="mujoco_playground dm_control_suite_params.brax_ppo_config",
        timesteps=40_000,
        ppo={
            **COMMON,
            "episode_length": 200,
            "learning_rate": 1e-3,
            "entropy_cost": 1e-2,
            "discounting": 0.99,
        },
    ),
}


DEFAULT_ENVS = ("inverted_pendulum", "inverted_double_pendulum")


def network_factory():
    """Small networks (CPU): two hidden layers of 32 for the policy and the value."""
    from brax.training.agents.ppo import networks as ppo_networks

    return functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=(32, 32),
        value_hidden_layer_sizes=(32, 32),
    )


def train(task: Task, variant: str, scaling: float, seed: int, timesteps: int):
    """One PPO run: ``(steps, raw evaluation returns, their episode lengths, seconds)``."""
    from brax.training.agents.ppo import train as ppo

    import rewardnorm_jax as rn
    from rewardnorm_jax import brax as rnb

    env, wrap = task.load()
    kwargs: dict[str, Any] = {"wrap_env_fn": wrap}
    if variant == "normalized":
        transform = rn.normalize_reward(task.ppo["discounting"])
        kwargs = {
            "wrap_env_fn": rnb.wrap_env_fn(transform, wrap=wrap),
            "eval_env": rnb.RawRewardEvaluation(env),
        }
    curve: list[tuple[int, float, float]] = []
    start = time.perf_counter()
    ppo.train(
        env,
        num_timesteps=timesteps,
        reward_scaling=scaling,
        seed=seed,
        network_factory=network_factory(),
        progress_fn=lambda step, m: curve.append(
            (step, float(m["eval/episode_reward"]), float(m["eval/avg_episode_length"]))
        ),
        **task.ppo,
        **kwargs,
    )
    seconds = time.perf_counter() - start
    steps, returns, lengths = (np.array(column) for column in zip(*curve, strict=True))
    return steps, returns, lengths, seconds


def variants(scales: Sequence[float], config_scaling: float) -> dict[str, float]:
    """Variant name -> Brax ``reward_scaling``; the config's value joins the constants."""
    found = {"normalized": 1.0}
    for scale in sorted({*scales, config_scaling}):
        name = f"scale={scale:g}" + (" (config)" if scale == config_scaling else "")
        found[name] = float(scale)
    return found


def summary(runs: list) -> dict[str, Any]:
    """Mean +- std over seeds of the final return and of the curve's mean."""
    finals = np.array([returns[-1] for _, returns, _, _ in runs])
    means = np.array([returns.mean() for _, returns, _, _ in runs])
    return {
        "final": f"{finals.mean():.1f} +- {finals.std():.1f}",
        "curve mean": f"{means.mean():.1f} +- {means.std():.1f}",
        "finals": finals,
        "seconds": float(sum(seconds for _, _, _, seconds in runs)),
    }


def plot(results: dict, path: str) -> None:
    """One panel per environment: mean raw return over seeds, min to max shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (env_name, by_variant) in zip(axes[0], results.items(), strict=True):
        for variant, runs in by_variant.items():
            steps = runs[0][0]
            returns = np.stack([r for _, r, _, _ in runs])
            (line,) = ax.plot(steps, returns.mean(0), label=variant)
            ax.fill_between(
                steps, returns.min(0), returns.max(0), alpha=0.15, color=line.get_color()
            )
        ax.set_title(f"{env_name} ({len(runs)} seeds)")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("raw evaluation return")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--envs", nargs="+", default=list(DEFAULT_ENVS), choices=list(TASKS), help="environments"
    )
    parser.add_argument("--seeds", type=int, default=2, help="seeds per variant (default 2)")
    parser.add_argument("--scales", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument(
        "--timesteps", type=int, default=None, help="environment steps per run (default per env)"
    )
    parser.add_argument("--num-evals", type=int, default=None, help="evaluations per run")
    parser.add_argument(
        "--variants", nargs="+", default=None, help="run only these (e.g. normalized 'scale=1')"
    )
    parser.add_argument(
        "--plot", default="docs/_static/brax_scale.png", help="PNG path ('' for none)"
    )
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    return parser.parse_args(argv)


def train_seeds(env_name: str, variant: str, scaling: float, seeds: int, timesteps: int, num_evals):
    """Every seed of one variant, in this process: ``[(steps, returns, lengths, seconds)]``."""
    task = TASKS[env_name]
    if num_evals is not None:
        task = dataclasses.replace(task, ppo={**task.ppo, "num_evals": num_evals})
    return [train(task, variant, scaling, seed, timesteps) for seed in range(seeds)]


def in_fresh_process(fn, *args):
    """``fn(*args)`` in a new interpreter, whose compiled programs end with it.

    XLA:CPU keeps every program it compiled mapped in memory; dozens of Brax
    trainers in one process run out of memory mappings.
    """
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()


def main(argv=None) -> dict:
    """Every environment, variant and seed; prints the table, saves the curves."""
    args = parse_args(argv)
    started = time.perf_counter()
    results: dict[str, dict[str, list]] = {}
    rows = []
    for env_name in args.envs:
        task = TASKS[env_name]
        if env_name == "CartpoleBalance":
            assert _playground_scaling(env_name) == task.config_scaling, "config moved"
        chosen = variants(args.scales, task.config_scaling)
        unknown = set(args.variants or ()) - set(chosen)
        if unknown:
            raise ValueError(f"--variants {sorted(unknown)}: not among {list(chosen)}")
        results[env_name] = {}
        for variant, scaling in chosen.items():
            if args.variants and variant not in args.variants:
                continue
            runs = in_fresh_process(
                train_seeds,
                env_name,
                variant,
                scaling,
                args.seeds,
                args.timesteps or task.timesteps,
                args.num_evals,
            )
            results[env_name][variant] = runs
            s = summary(runs)
            rows.append([env_name, variant, s["final"], s["curve mean"], f"{s['seconds']:.0f}"])
            print("done:", " | ".join(rows[-1]), file=sys.stderr, flush=True)
    total = time.perf_counter() - started
    headers = ["env", "variant", "final raw return", "mean over curve", "seconds"]
    print("### Brax PPO: normalized rewards against constant reward_scaling\n")
    print(f"Machine: {environment(PACKAGES)}  ")
    print(f"Command: `{command_line()}` ({total / 60:.1f} min)  ")
    print(f"Seeds: {args.seeds}; return: mean +- std over seeds of the raw evaluation return\n")
    print(markdown_table(headers, rows) if args.markdown else plain_table(headers, rows))
    if args.plot:
        plot(results, args.plot)
        print(f"\nCurves: {args.plot}")
    return results


if __name__ == "__main__":
    main()
