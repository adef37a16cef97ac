"""Train PPO with reward normalization on a gymnax environment.

Run ``python -m rewardnorm_jax.demo --help`` for the options. With the
defaults it trains four seeds of PPO on CartPole-v1 for 500,000 steps each
(one jitted, vmapped function, called in chunks of updates so that a progress
line is printed about every tenth of the run), then evaluates each agent with
the normalization statistics frozen.

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
from typing import Any

import jax
import numpy as np
from flax import serialization

from rewardnorm_jax.examples import ppo


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
    """The command-line parser of ``rewardnorm-demo``."""
    parser = argparse.ArgumentParser(
        prog="python -m rewardnorm_jax.demo",
        description="PPO on a gymnax environment with rewardnorm_jax reward normalization; "
        "several seeds trained at once with jax.vmap inside one jitted function.",
    )
    parser.add_argument("--env", default=None, help="gymnax environment name (default CartPole-v1)")
    parser.add_argument(
        "--total-steps",
        type=_positive_int,
        default=None,
        help="environment steps per seed (default: the environment's tuned "
        "setting, 500000 for CartPole-v1 and Pendulum-v1)",
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=None,
        help="parallel environments per seed (default 4; 16 for Box actions)",
    )
    parser.add_argument(
        "--seeds",
        type=_positive_int,
        default=None,
        help="number of seeds trained at once with jax.vmap (default 4)",
    )
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, help="base random seed (default 0)"
    )
    parser.add_argument(
        "--no-normalize", action="store_true", help="train on raw rewards (no reward normalization)"
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


def _check_checkpoint_dir(parser: argparse.ArgumentParser, directory: str) -> None:
    """Exits with status 2 unless ``directory`` is, or can be created as, a writable folder."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        parser.error(f"--checkpoint {directory} is a file; give a directory.")
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        parser.error(f"--checkpoint {directory}: cannot write to {existing}.")


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Returns ``(config, runners or None)``; exits with status 2 on bad input."""
    if args.checkpoint is not None and not args.eval_only:
        _check_checkpoint_dir(parser, args.checkpoint)
    path = None if args.checkpoint is None else os.path.join(args.checkpoint, ppo.CHECKPOINT_FILE)
    if path is not None and os.path.exists(path):
        try:
            config, runners = ppo.load_checkpoint(args.checkpoint)
        except (ValueError, KeyError, TypeError) as error:
            parser.error(f"cannot read the checkpoint {path}: {error}")
        num_seeds = int(runners.key.shape[0])
        conflicts = [
            f"{flag} {given} (checkpoint: {saved})"
            for flag, given, saved in [
                ("--env", args.env, config.env_name),
                ("--num-envs", args.num_envs, config.num_envs),
                ("--seeds", args.seeds, num_seeds),
            ]
            if given is not None and given != saved
        ]
        if args.no_normalize and config.normalize:
            conflicts.append("--no-normalize (checkpoint: trained with normalization)")
        if conflicts:
            parser.error(
                f"{'; '.join(conflicts)} does not match the checkpoint in "
                f"{args.checkpoint}; leave it out to resume or evaluate the checkpoint."
            )
        if args.total_steps is not None:
            config = dataclasses.replace(config, total_steps=args.total_steps)
        try:
            return config.validate(), runners
        except ValueError as error:
            parser.error(str(error))
    if args.eval_only:
        parser.error(
            "--eval-only needs --checkpoint DIR with a saved checkpoint "
            f"({'no --checkpoint given' if path is None else 'none at ' + path})."
        )
    env_name = args.env or ppo.PPOConfig.env_name
    if env_name not in ppo.ENV_NAMES:
        parser.error(
            f"--env {env_name!r} is not a supported gymnax environment; "
            f"valid names: {', '.join(ppo.ENV_NAMES)}."
        )
    try:
        config = ppo.default_config(env_name)
        overrides: dict[str, Any] = {"normalize": not args.no_normalize}
        if args.total_steps is not None:
            overrides["total_steps"] = args.total_steps
        if args.num_envs is not None:
            overrides["num_envs"] = args.num_envs
        return dataclasses.replace(config, **overrides).validate(), None
    except ValueError as error:
        parser.error(str(error))


def _evaluate(config, runners, seed):
    start = time.perf_counter()
    returns, norm_states = ppo.evaluate(config, runners, seed)
    returns = np.asarray(jax.block_until_ready(returns))
    per_seed = returns.mean(axis=1)
    frozen = ", statistics frozen" if config.normalize else ""
    print(
        f"evaluation ({config.num_eval_envs} episodes per seed, policy mode{frozen}): "
        f"mean return {per_seed.mean():.2f} ± {per_seed.std():.2f} over {per_seed.size} seeds "
        f"[{', '.join(f'{r:.1f}' for r in per_seed)}] ({time.perf_counter() - start:.1f} s)"
    )
    if config.normalize:
        unchanged = serialization.to_bytes(norm_states.stats) == serialization.to_bytes(
            ppo.norm_state(runners).stats
        )
        print(
            f"normalization statistics unchanged by evaluation: {'yes' if unchanged else 'NO'}; "
            "return std per seed "
            f"[{', '.join(f'{s:.3g}' for s in np.asarray(ppo.norm_state(runners).stats.std))}]"
        )
    return per_seed


def main(argv=None) -> int:
    """Runs the demo with the command-line arguments ``argv``; returns the exit status."""
    start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    config, runners = _resolve(parser, args)
    resumed = runners is not None
    num_seeds = int(runners.key.shape[0]) if resumed else (args.seeds or 4)

    print(
        f"rewardnorm_jax PPO demo: {config.env_name}, {num_seeds} seeds x "
        f"{config.num_envs} envs, reward normalization {'on' if config.normalize else 'off'}, "
        f"JAX {jax.__version__} on {jax.devices()[0].platform} "
        f"x{jax.device_count()}",
        flush=True,
    )
    if resumed:
        print(f"restored checkpoint {os.path.join(args.checkpoint, ppo.CHECKPOINT_FILE)}")
    if args.eval_only:
        _evaluate(config, runners, args.seed)
        print(f"total wall time {time.perf_counter() - start:.1f} s")
        return 0

    if not resumed:
        runners = ppo.init_runners(config, args.seed, num_seeds)
    print(
        f"training {config.num_updates} updates of {config.batch_size} steps per seed "
        f"({config.num_updates * config.batch_size:,} steps per seed); compiling ...",
        flush=True,
    )
    result = ppo.train(config, runners, lambda line: print(line, flush=True))
    print(
        f"compiled in {result.compile_s:.1f} s, trained in {result.train_s:.1f} s "
        f"({config.num_updates * config.batch_size * num_seeds / result.train_s:,.0f} steps/s "
        "over all seeds)"
    )
    final = np.asarray(result.metrics.episode_return)[:, -1]
    print(
        f"final training episode return {np.nanmean(final):.2f} ± {np.nanstd(final):.2f} "
        f"over {num_seeds} seeds"
    )
    _evaluate(config, result.runners, args.seed)
    if args.checkpoint is not None:
        print(f"saved checkpoint {ppo.save_checkpoint(args.checkpoint, config, result.runners)}")
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
