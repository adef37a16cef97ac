"""PPO with and without reward normalization, side by side, on a gymnax environment.

Run ``python -m rewardnorm_jax.demo --help`` for the options. With no options
it trains 8 seeds of PPO on Pendulum-v1 for 204,800 steps each, once on
normalized rewards and once on raw rewards: the 16 runs are one jitted
function vmapped over seeds x {normalized, raw}, called in chunks of updates so
that a progress line is printed about every tenth of the run. It then prints
the return of both arms at several points of training, evaluates every agent
with its statistics frozen, and writes the learning curves of both arms to a
PNG file. ``--no-compare`` trains the normalized arm only, ``--no-normalize``
the raw arm only.

``--checkpoint DIR`` saves the agents, optimizers, environments and
normalization statistics after training; when ``DIR`` already holds a
checkpoint the run resumes from it (``--total-steps`` more steps, learning
rate annealed over them), and ``--eval-only`` just evaluates it. Bad input
exits with status 2 and a message saying what is valid.

The training code lives in :mod:`rewardnorm_jax.examples.ppo`.
"""

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable

import jax
import numpy as np
from flax import serialization
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from rewardnorm_jax.examples import ppo

DEFAULT_ENV = "Pendulum-v1"
DEFAULT_SEEDS = 8
TABLE_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)  # points of training shown in the table
COLORS = {"normalized": "C0", "raw": "C3"}


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(
        prog="python -m rewardnorm_jax.demo",
        description="PPO on a gymnax environment with and without rewardnorm_jax reward "
        "normalization: seeds x {normalized, raw} trained at once with jax.vmap inside one "
        "jitted function.",
    )
    parser.add_argument(
        "--env", default=None, help=f"gymnax environment name (default {DEFAULT_ENV})"
    )
    parser.add_argument(
        "--total-steps",
        type=_positive_int,
        default=None,
        help="environment steps per run (default: the environment's tuned setting, "
        "204800 for Box actions such as Pendulum-v1, 500000 otherwise)",
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=None,
        help="parallel environments per run (default 16 for Box actions, 4 otherwise)",
    )
    parser.add_argument(
        "--seeds",
        type=_positive_int,
        default=None,
        help=f"seeds per arm, trained at once with jax.vmap (default {DEFAULT_SEEDS})",
    )
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, help="base random seed (default 0)"
    )
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="train the normalized arm only (no raw-reward runs)",
    )
    parser.add_argument(
        "--no-normalize",
        action="store_true",
        help="train the raw-reward arm only (no reward normalization)",
    )
    parser.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="learning-curve PNG to write (default rewardnorm_demo_<env>.png here)",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="save agent and normalization state to DIR; resume if DIR holds one",
    )
    parser.add_argument(
        "--eval-only", action="store_true", help="only evaluate the checkpoint in --checkpoint DIR"
    )
    return parser


def _check_writable(
    parser: argparse.ArgumentParser, option: str, path: str, directory: bool
) -> None:
    """Exits with status 2 unless ``path`` can be written as a folder or a file."""
    if os.path.exists(path) and os.path.isdir(path) != directory:
        parser.error(
            f"{option} {path} is a {'file' if directory else 'directory'}; "
            f"give a {'directory' if directory else 'file name'}."
        )
    existing = os.path.abspath(path if directory else os.path.dirname(os.path.abspath(path)))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        parser.error(f"{option} {path}: cannot write to {existing}.")


def _requested_arms(args: argparse.Namespace) -> tuple[bool, ...] | None:
    """The arms the options ask for, or ``None`` when they leave it open."""
    if args.no_normalize:
        return (False,)
    if args.no_compare:
        return (True,)
    return None


def _load(
    parser: argparse.ArgumentParser, directory: str, path: str
) -> tuple[ppo.PPOConfig, ppo.Runner]:
    """The checkpoint in ``directory``; exits with status 2 if it cannot be read."""
    try:
        return ppo.load_checkpoint(directory)
    except (OSError, ValueError, KeyError, TypeError) as error:
        parser.error(f"cannot read the checkpoint {path}: {error}")


def _validated(parser: argparse.ArgumentParser, make: Callable[[], ppo.PPOConfig]) -> ppo.PPOConfig:
    """``make()``, validated; exits with status 2 and the ValueError's message."""
    try:
        return make().validate()
    except ValueError as error:
        parser.error(str(error))


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Returns ``(config, arms, runners or None)``; exits with status 2 on bad input."""
    if args.checkpoint is not None and not args.eval_only:
        _check_writable(parser, "--checkpoint", args.checkpoint, directory=True)
    path = None if args.checkpoint is None else os.path.join(args.checkpoint, ppo.CHECKPOINT_FILE)
    if path is not None and os.path.exists(path):
        config, runners = _load(parser, args.checkpoint, path)
        normalized = ppo.normalizes(runners)
        arms = tuple(bool(arm) for arm in dict.fromkeys(normalized.tolist()))
        describe = "+".join(ppo.ARM_LABELS[arm] for arm in arms)
        requested = _requested_arms(args)
        conflicts = [
            f"{flag} {given} (checkpoint: {saved})"
            for flag, given, saved in [
                ("--env", args.env, config.env_name),
                ("--num-envs", args.num_envs, config.num_envs),
                ("--seeds", args.seeds, normalized.size // len(arms)),
            ]
            if given is not None and given != saved
        ]
        if requested is not None and requested != arms:
            flag = "--no-normalize" if args.no_normalize else "--no-compare"
            conflicts.append(f"{flag} (checkpoint: {describe} runs)")
        if conflicts:
            parser.error(
                f"{'; '.join(conflicts)} does not match the checkpoint in "
                f"{args.checkpoint}; leave it out to resume or evaluate the checkpoint."
            )
        if args.total_steps is not None:
            config = dataclasses.replace(config, total_steps=args.total_steps)
        return _validated(parser, lambda: config), arms, runners
    if args.eval_only:
        parser.error(
            "--eval-only needs --checkpoint DIR with a saved checkpoint "
            f"({'no --checkpoint given' if path is None else 'none at ' + path})."
        )
    env_name = args.env or DEFAULT_ENV
    if env_name not in ppo.ENV_NAMES:
        parser.error(
            f"--env {env_name!r} is not a supported gymnax environment; "
            f"valid names: {', '.join(ppo.ENV_NAMES)}."
        )
    overrides = {
        name: value
        for name, value in (("total_steps", args.total_steps), ("num_envs", args.num_envs))
        if value is not None
    }
    config = _validated(
        parser, lambda: dataclasses.replace(ppo.default_config(env_name), **overrides)
    )
    return config, _requested_arms(args) or (True, False), None


def _table(config: ppo.PPOConfig, returns: np.ndarray, normalized: np.ndarray) -> list[str]:
    """The training return of each arm at :data:`TABLE_FRACTIONS` of the run."""
    arms = ppo.by_arm(returns, normalized)
    num_seeds = next(iter(arms.values())).shape[0]
    updates = sorted({max(1, round(f * config.num_updates)) for f in TABLE_FRACTIONS})
    header = f"{'steps':>10s} | " + " | ".join(f"{label:>17s}" for label in arms)
    lines = [
        f"episode return during training (raw rewards, mean ± std over {num_seeds} seeds):",
        header,
        "-" * len(header),
    ]
    for update in updates:
        cells = " | ".join(ppo.mean_std(values[:, update - 1]) for values in arms.values())
        lines.append(f"{update * config.batch_size:>10,d} | {cells}")
    return lines


def _plot(path: str, config: ppo.PPOConfig, returns: np.ndarray, normalized: np.ndarray) -> str:
    """Writes the learning curves (mean ± std over seeds, and each seed) to ``path``."""
    steps = (np.arange(config.num_updates) + 1) * config.batch_size
    started = ~np.isnan(returns).any(axis=0)  # every run has finished an episode
    fig = Figure(figsize=(7, 4), dpi=110)
    ax = fig.add_subplot()
    for label, curves in ppo.by_arm(returns, normalized).items():
        x, curves = steps[started], curves[:, started]
        mean, std = curves.mean(axis=0), curves.std(axis=0)
        color = COLORS[label]
        ax.plot(x, mean, color=color, lw=2, label=f"{label} rewards ({len(curves)} seeds)")
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2)
        for curve in curves:
            ax.plot(x, curve, color=color, lw=0.5, alpha=0.4)
    ax.set(
        xlabel="environment steps per run",
        ylabel="episode return",
        title=f"PPO on gymnax {config.env_name}",
    )
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k"))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    return os.path.abspath(path)


def _evaluate(config, runners, seed) -> None:
    start = time.perf_counter()
    returns, norm_states = ppo.evaluate(config, runners, seed)
    per_run = np.asarray(jax.block_until_ready(returns)).mean(axis=1)
    normalized = ppo.normalizes(runners)
    print(
        f"evaluation, statistics frozen ({config.num_eval_envs} episodes per seed, policy mode; "
        f"{time.perf_counter() - start:.1f} s):"
    )
    for label, values in ppo.by_arm(per_run, normalized).items():
        print(
            f"  {label:10s} {ppo.mean_std(values)}   per seed "
            f"[{', '.join(f'{r:.1f}' for r in values)}]"
        )
    trained = ppo.norm_state(runners).stats
    unchanged = serialization.to_bytes(norm_states.stats) == serialization.to_bytes(trained)
    print(f"normalization statistics unchanged by evaluation: {'yes' if unchanged else 'NO'}")
    if normalized.any():
        stds = np.asarray(trained.std)[normalized]
        print(f"return std learned per normalized seed [{', '.join(f'{s:.3g}' for s in stds)}]")


def main(argv=None) -> int:
    """Runs the demo; returns the exit status (2 for bad input, through ``argparse``)."""
    start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    config, arms, runners = _resolve(parser, args)
    resumed = runners is not None
    num_seeds = int(runners.key.shape[0]) // len(arms) if resumed else (args.seeds or DEFAULT_SEEDS)
    plot = args.plot or f"rewardnorm_demo_{config.env_name}.png"
    if not args.eval_only:
        _check_writable(parser, "--plot", plot, directory=False)

    print(
        f"rewardnorm_jax PPO demo: {config.env_name}, "
        f"{' and '.join(ppo.ARM_LABELS[arm] for arm in arms)} rewards, "
        f"{num_seeds} seeds x {config.num_envs} envs per arm, "
        f"JAX {jax.__version__} on {jax.devices()[0].platform} x{jax.device_count()}",
        flush=True,
    )
    if resumed:
        print(f"restored checkpoint {os.path.join(args.checkpoint, ppo.CHECKPOINT_FILE)}")
    if args.eval_only:
        _evaluate(config, runners, args.seed)
        print(f"total wall time {time.perf_counter() - start:.1f} s")
        return 0

    if not resumed:
        runners = ppo.init_runners(config, args.seed, num_seeds, normalize=arms)
    num_runs = num_seeds * len(arms)
    print(
        f"training {num_runs} runs as one jitted program: {config.num_updates} updates of "
        f"{config.batch_size} steps ({config.num_updates * config.batch_size:,} steps per run); "
        "compiling ...",
        flush=True,
    )
    result = ppo.train(config, runners, lambda line: print(line, flush=True))
    print(
        f"compiled in {result.compile_s:.1f} s, trained in {result.train_s:.1f} s "
        f"({config.num_updates * config.batch_size * num_runs / result.train_s:,.0f} steps/s "
        "over all runs)"
    )
    returns = np.asarray(result.metrics.episode_return)
    normalized = ppo.normalizes(result.runners)
    print("\n".join(_table(config, returns, normalized)))
    _evaluate(config, result.runners, args.seed)
    print(f"learning curves: {_plot(plot, config, returns, normalized)}")
    if args.checkpoint is not None:
        print(f"saved checkpoint {ppo.save_checkpoint(args.checkpoint, config, result.runners)}")
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
