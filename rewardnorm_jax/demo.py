"""PPO with and without reward normalization, side by side, on a gymnax environment.

Run ``python -m rewardnorm_jax.demo --help`` for the options. With no options
it trains 8 seeds of PPO on Pendulum-v1 for 204,800 steps each, once on
normalized rewards and once on raw rewards (the two arms, ``normalize=True``
and ``normalize=False`` in :class:`~rewardnorm_jax.examples.ppo.PPOConfig`):
each arm's training function vmapped over its seeds, both arms in one jitted
function, called in chunks of updates so that a progress line is printed
about every tenth of the run. It then prints the return of both arms at
several points of training, evaluates every agent with its statistics frozen,
and writes the learning curves of both arms to a PNG file. ``--no-compare``
trains the normalized arm only, ``--no-normalize`` the raw arm only.

``--checkpoint DIR`` saves the agents, optimizers, environments and
normalization statistics after training; when ``DIR`` already holds a
checkpoint the run resumes from it (``--total-steps`` more steps, learning
rate annealed over them), and ``--eval-only`` just evaluates it. Bad input
exits with status 2 and a message saying what is valid.

The PPO itself is :mod:`rewardnorm_jax.examples.ppo`; this module runs the
arms side by side, with progress, evaluation, table, plot and checkpoints.
"""

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

import rewardnorm_jax as rn
from rewardnorm_jax._src.core.extras import requires
from rewardnorm_jax.examples import ppo

with requires("demo", __name__):
    import gymnax
    from gymnax.environments import spaces
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    import rewardnorm_jax.gymnax as rngym

# gymnax environments the PPO runs (an MLP on flattened observations, Discrete
# or Box actions); MNISTBandit-bsuite is left out as it downloads a data set.
ENV_NAMES = tuple(name for name in gymnax.registered_envs if name != "MNISTBandit-bsuite")
ARMS = {"normalized": True, "raw": False}  # each arm's label and PPOConfig.normalize
DEFAULT_ENV = "Pendulum-v1"
DEFAULT_SEEDS = 8
LOG_LINES = 10  # progress lines per run
TABLE_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)  # points of training shown in the table
COLORS = {"normalized": "C0", "raw": "C3"}
CHECKPOINT_FILE = "checkpoint.msgpack"  # rewardnorm_jax.save_state of the runs
CONFIG_FILE = "config.json"  # the config, arms and number of seeds, to build the template

Runs = dict[str, ppo.Runner]  # per arm label, in order: runners stacked over seeds


def default_config(env_name: str) -> ppo.PPOConfig:
    """The tuned settings for ``env_name``: ``ppo.PENDULUM``'s for Box actions, else CartPole's."""
    env, params = gymnax.make(env_name)
    box = isinstance(env.action_space(params), spaces.Box)
    return dataclasses.replace(ppo.PENDULUM if box else ppo.PPOConfig(), env_name=env_name)


def check_config(config: ppo.PPOConfig) -> ppo.PPOConfig:
    """Returns ``config``; raises ValueError naming the bad field and its valid range."""
    if config.env_name not in ENV_NAMES:
        raise ValueError(
            f"env_name={config.env_name!r} is not a supported gymnax environment; "
            f"valid names: {', '.join(ENV_NAMES)}."
        )
    counts = ("total_steps", "num_envs", "num_steps", "update_epochs", "num_minibatches")
    for name in (*counts, "hidden_size", "num_eval_envs"):
        value = getattr(config, name)
        if not (isinstance(value, int) and value > 0):
            raise ValueError(f"{name} should be a positive integer, got {name}={value!r}.")
    if config.total_steps < config.batch_size:
        raise ValueError(
            f"total_steps={config.total_steps} is less than one update "
            f"(num_envs * num_steps = {config.batch_size}); use at least {config.batch_size}."
        )
    if config.batch_size % config.num_minibatches:
        raise ValueError(
            f"num_minibatches={config.num_minibatches} should divide num_envs * num_steps "
            f"= {config.batch_size}."
        )
    for name in ("gamma", "gae_lambda"):
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} should be in [0, 1], got {name}={value!r}.")
    return config


def arm_config(config: ppo.PPOConfig, arm: str) -> ppo.PPOConfig:
    """``config`` for the arm labelled ``arm``: its ``normalize`` set from :data:`ARMS`."""
    return dataclasses.replace(config, normalize=ARMS[arm])


def _check_arms(arms: Sequence[str]) -> tuple[str, ...]:
    labels = tuple(arms) if not isinstance(arms, str) else ()
    if not labels or len(set(labels)) < len(labels) or not set(labels) <= set(ARMS):
        raise ValueError(
            f"arms should be a non-empty sequence of distinct labels from {tuple(ARMS)}, "
            f"got {arms!r}."
        )
    return labels


def _layout(runs: Runs) -> tuple[tuple[str, ...], int]:
    """The arms of ``runs`` and the number of seeds per arm."""
    return tuple(runs), int(next(iter(runs.values())).key.shape[0])


@functools.lru_cache(maxsize=16)
def _jitted_init(config: ppo.PPOConfig):
    return jax.jit(ppo.make_init(config))


def init_runs(
    config: ppo.PPOConfig, seed: int, num_seeds: int, arms: Sequence[str] = tuple(ARMS)
) -> Runs:
    """Fresh runs: for each arm, ``num_seeds`` runners stacked on a leading axis.

    Seed ``i`` of every arm starts from the same key, so the arms start from
    the same networks and environments.

    Raises:
      ValueError: if ``arms`` is not a non-empty sequence of distinct labels of :data:`ARMS`.
    """
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    runs = {}
    for arm in _check_arms(arms):
        init = _jitted_init(arm_config(config, arm))
        runners = [init(key) for key in keys]  # a vmapped init deadlocks jaxlib's CPU QR
        runs[arm] = jax.tree.map(lambda *leaves: jnp.stack(leaves), *runners)
    return runs


def _run_shapes(config: ppo.PPOConfig, arms: tuple[str, ...], num_seeds: int) -> Runs:
    """Shapes and dtypes of :func:`init_runs`' result, without running anything."""
    keys = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32)
    return {
        arm: jax.eval_shape(jax.vmap(_jitted_init(arm_config(config, arm))), keys) for arm in arms
    }


def statistics(runners: ppo.Runner) -> rn.RunningStats:
    """The normalizer's statistics inside (stacked) runners of the normalized arm."""
    return rngym.get_transform_state(runners.env_state).stats


# --- Training in chunks, with progress ------------------------------------------------


def log_every(config: ppo.PPOConfig) -> int:
    """Updates between progress lines: ``ceil(num_updates / LOG_LINES)``."""
    return -(-config.num_updates // LOG_LINES)


def chunk_size(config: ppo.PPOConfig) -> int:
    """Updates per jitted call.

    The largest divisor of ``num_updates`` that is at most :func:`log_every`,
    so one compiled chunk covers the run exactly.
    """
    return max(d for d in range(1, log_every(config) + 1) if config.num_updates % d == 0)


def mean_std(values: np.ndarray) -> str:
    """``"mean ± std"`` of the finite ``values`` (``"n/a"`` when none is finite)."""
    finite = values[np.isfinite(values)]
    return f"{finite.mean():8.2f} ± {finite.std():6.2f}" if finite.size else f"{'n/a':>17s}"


def progress_line(
    config: ppo.PPOConfig, update: int, returns: dict[str, np.ndarray], rate: float
) -> str:
    """``update u/U | steps s | normalized m ± s | raw m ± s | r steps/s``.

    Args:
      config: the run's hyperparameters.
      update: updates done.
      returns: per arm, the latest episode return of each seed.
      rate: environment steps per second over all runs.

    Returns:
      The line, with the mean ± std over seeds of each arm.
    """
    arms = " | ".join(f"{arm} {mean_std(values)}" for arm, values in returns.items())
    return (
        f"update {update:5d}/{config.num_updates} | steps {update * config.batch_size:>10,d} | "
        f"{arms} | {rate:10,.0f} steps/s"
    )


@functools.lru_cache(maxsize=16)
def _compiled_train(config: ppo.PPOConfig, arms: tuple[str, ...], num_seeds: int):
    """One chunk of every run, compiled once: per arm ``vmap(train)`` over seeds, one ``jit``."""
    chunk = chunk_size(config)
    trains = {
        arm: jax.vmap(ppo.make_train(arm_config(config, arm), chunk), in_axes=(0, None))
        for arm in arms
    }

    def train_chunk(runs, first):
        return {arm: trains[arm](runners, first) for arm, runners in runs.items()}

    first = jax.ShapeDtypeStruct((), jnp.int32)
    return jax.jit(train_chunk).lower(_run_shapes(config, arms, num_seeds), first).compile()


@functools.lru_cache(maxsize=16)
def _compiled_evaluate(config: ppo.PPOConfig, arms: tuple[str, ...], num_seeds: int):
    evaluates = {arm: jax.vmap(ppo.make_evaluate(arm_config(config, arm))) for arm in arms}

    def evaluate_all(runs, keys):
        return {arm: evaluates[arm](runners, keys) for arm, runners in runs.items()}

    keys = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32)
    return jax.jit(evaluate_all).lower(_run_shapes(config, arms, num_seeds), keys).compile()


class RunResult(NamedTuple):
    """What :func:`train` returns."""

    runs: Runs
    returns: dict[str, np.ndarray]  # per arm, (seeds, updates): the training episode returns
    compile_s: float  # 0 when this configuration was compiled before in the process
    train_s: float


def train(config: ppo.PPOConfig, runs: Runs, print_fn: Callable | None = None) -> RunResult:
    """Trains every run of ``runs`` for ``config.total_steps`` steps.

    The arms run as one compiled function called chunk after chunk (see
    :func:`chunk_size`), so the host reads the returns between chunks:
    ``print_fn`` receives a :func:`progress_line` about every
    ``num_updates / LOG_LINES`` updates and after the last. Progress needs no
    host callback inside the compiled loop.
    """
    arms, num_seeds = _layout(runs)
    start = time.perf_counter()
    compiled = _compiled_train(check_config(config), arms, num_seeds)
    compile_s = time.perf_counter() - start
    chunk, every = chunk_size(config), log_every(config)
    steps_per_update = config.batch_size * num_seeds * len(arms)
    start = time.perf_counter()
    chunks = []
    for first in range(0, config.num_updates, chunk):
        out = compiled(runs, jnp.int32(first))
        runs = {arm: runners for arm, (runners, _) in out.items()}
        chunks.append({arm: returns for arm, (_, returns) in out.items()})
        done = first + chunk
        crossed = done // every > first // every or done == config.num_updates
        if print_fn is not None and crossed:
            latest = {arm: np.asarray(returns[:, -1]) for arm, returns in chunks[-1].items()}
            rate = done * steps_per_update / max(time.perf_counter() - start, 1e-9)
            print_fn(progress_line(config, done, latest, rate))
    runs = jax.block_until_ready(runs)
    returns = {arm: np.concatenate([c[arm] for c in chunks], axis=1) for arm in arms}
    return RunResult(runs, returns, compile_s, time.perf_counter() - start)


def evaluate(config: ppo.PPOConfig, runs: Runs, seed: int = 0) -> dict[str, tuple[Any, Any]]:
    """Evaluates every run (see :func:`~rewardnorm_jax.examples.ppo.make_evaluate`).

    Seed ``i`` of each arm evaluates on the same episodes (the same key).

    Returns:
      Per arm, ``(returns, transform_states)``: raw episode returns of shape
      ``(seeds, num_eval_envs)`` and the transform states after evaluation,
      whose statistics equal those of ``runs``.
    """
    arms, num_seeds = _layout(runs)
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    return _compiled_evaluate(check_config(config), arms, num_seeds)(runs, keys)


# --- Checkpoints ----------------------------------------------------------------------


def _metadata(config: ppo.PPOConfig, arms: tuple[str, ...], num_seeds: int) -> dict[str, Any]:
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "normalize"}
    return {**fields, "arms": "+".join(arms), "num_seeds": num_seeds}


def _write_atomically(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def save_checkpoint(directory: str, config: ppo.PPOConfig, runs: Runs) -> str:
    """Writes agents, optimizers, environments and normalizer states to ``directory``.

    ``checkpoint.msgpack`` is :func:`rewardnorm_jax.save_state` of ``runs``
    with the config, the arms and the number of seeds as metadata;
    ``config.json`` repeats them in readable form, so that
    :func:`load_checkpoint` can build the template. Each file is written to a
    temporary name and renamed, so an interrupted save never leaves a torn file.

    Returns:
      The path of ``checkpoint.msgpack``.
    """
    os.makedirs(directory, exist_ok=True)
    metadata = _metadata(config, *_layout(runs))
    path = os.path.join(directory, CHECKPOINT_FILE)
    _write_atomically(os.path.join(directory, CONFIG_FILE), json.dumps(metadata).encode())
    _write_atomically(path, rn.save_state(jax.device_get(runs), metadata))
    return path


def load_checkpoint(directory: str) -> tuple[ppo.PPOConfig, Runs]:
    """Reads a checkpoint written by :func:`save_checkpoint`; arrays come back bit-exact.

    Raises:
      FileNotFoundError: if ``directory`` holds no checkpoint.
      ValueError: if a file is corrupt, or the state's layout or metadata
        differs from what ``config.json`` describes (the message lists each
        difference).
    """
    with open(os.path.join(directory, CONFIG_FILE)) as f:
        metadata = json.load(f)
    if not (
        isinstance(metadata, dict)
        and isinstance(metadata.get("arms"), str)
        and isinstance(metadata.get("num_seeds"), int)
    ):
        raise ValueError(f"{CONFIG_FILE} in {directory} holds no config, arms and number of seeds.")
    arms, num_seeds = _check_arms(metadata["arms"].split("+")), metadata["num_seeds"]
    fields = {field.name for field in dataclasses.fields(ppo.PPOConfig)} - {"normalize"}
    config = check_config(ppo.PPOConfig(**{k: v for k, v in metadata.items() if k in fields}))
    shapes = _run_shapes(config, arms, num_seeds)
    template = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    with open(os.path.join(directory, CHECKPOINT_FILE), "rb") as f:
        data = f.read()
    return config, rn.load_state(template, data, _metadata(config, arms, num_seeds))


# --- Command line ---------------------------------------------------------------------


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


def _requested_arms(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The arms the options ask for, or ``None`` when they leave it open."""
    if args.no_normalize:
        return ("raw",)
    if args.no_compare:
        return ("normalized",)
    return None


def _load(parser: argparse.ArgumentParser, directory: str, path: str) -> tuple[ppo.PPOConfig, Runs]:
    """The checkpoint in ``directory``; exits with status 2 if it cannot be read."""
    try:
        return load_checkpoint(directory)
    except (OSError, ValueError, KeyError, TypeError) as error:
        parser.error(f"cannot read the checkpoint {path}: {error}")


def _validated(parser: argparse.ArgumentParser, make: Callable[[], ppo.PPOConfig]) -> ppo.PPOConfig:
    """``make()``, checked; exits with status 2 and the ValueError's message."""
    try:
        return check_config(make())
    except ValueError as error:
        parser.error(str(error))


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Returns ``(config, arms, runs or None)``; exits with status 2 on bad input."""
    if args.checkpoint is not None and not args.eval_only:
        _check_writable(parser, "--checkpoint", args.checkpoint, directory=True)
    path = None if args.checkpoint is None else os.path.join(args.checkpoint, CHECKPOINT_FILE)
    if path is not None and os.path.exists(path):
        config, runs = _load(parser, args.checkpoint, path)
        arms, num_seeds = _layout(runs)
        requested = _requested_arms(args)
        conflicts = [
            f"{flag} {given} (checkpoint: {saved})"
            for flag, given, saved in [
                ("--env", args.env, config.env_name),
                ("--num-envs", args.num_envs, config.num_envs),
                ("--seeds", args.seeds, num_seeds),
            ]
            if given is not None and given != saved
        ]
        if requested is not None and requested != arms:
            flag = "--no-normalize" if args.no_normalize else "--no-compare"
            conflicts.append(f"{flag} (checkpoint: {'+'.join(arms)} runs)")
        if conflicts:
            parser.error(
                f"{'; '.join(conflicts)} does not match the checkpoint in "
                f"{args.checkpoint}; leave it out to resume or evaluate the checkpoint."
            )
        if args.total_steps is not None:
            config = dataclasses.replace(config, total_steps=args.total_steps)
        return _validated(parser, lambda: config), arms, runs
    if args.eval_only:
        parser.error(
            "--eval-only needs --checkpoint DIR with a saved checkpoint "
            f"({'no --checkpoint given' if path is None else 'none at ' + path})."
        )
    env_name = args.env or DEFAULT_ENV
    if env_name not in ENV_NAMES:
        parser.error(
            f"--env {env_name!r} is not a supported gymnax environment; "
            f"valid names: {', '.join(ENV_NAMES)}."
        )
    overrides = {
        name: value
        for name, value in (("total_steps", args.total_steps), ("num_envs", args.num_envs))
        if value is not None
    }
    config = _validated(parser, lambda: dataclasses.replace(default_config(env_name), **overrides))
    return config, _requested_arms(args) or tuple(ARMS), None


def _table(config: ppo.PPOConfig, returns: dict[str, np.ndarray]) -> list[str]:
    """The training return of each arm at :data:`TABLE_FRACTIONS` of the run."""
    num_seeds = next(iter(returns.values())).shape[0]
    updates = sorted({max(1, round(f * config.num_updates)) for f in TABLE_FRACTIONS})
    header = f"{'steps':>10s} | " + " | ".join(f"{arm:>17s}" for arm in returns)
    lines = [
        f"episode return during training (raw rewards, mean ± std over {num_seeds} seeds):",
        header,
        "-" * len(header),
    ]
    for update in updates:
        cells = " | ".join(mean_std(values[:, update - 1]) for values in returns.values())
        lines.append(f"{update * config.batch_size:>10,d} | {cells}")
    return lines


def _plot(path: str, config: ppo.PPOConfig, returns: dict[str, np.ndarray]) -> str:
    """Writes the learning curves (mean ± std over seeds, and each seed) to ``path``."""
    steps = (np.arange(config.num_updates) + 1) * config.batch_size
    # From the first update after which every run has finished an episode.
    started = ~np.isnan(np.concatenate(list(returns.values()))).any(axis=0)
    fig = Figure(figsize=(7, 4), dpi=110)
    ax = fig.add_subplot()
    for arm, curves in returns.items():
        x, curves = steps[started], curves[:, started]
        mean, std = curves.mean(axis=0), curves.std(axis=0)
        color = COLORS[arm]
        ax.plot(x, mean, color=color, lw=2, label=f"{arm} rewards ({len(curves)} seeds)")
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


def _evaluate(config: ppo.PPOConfig, runs: Runs, seed: int) -> None:
    start = time.perf_counter()
    results = jax.block_until_ready(evaluate(config, runs, seed))
    print(
        f"evaluation, statistics frozen ({config.num_eval_envs} episodes per seed, policy mode; "
        f"{time.perf_counter() - start:.1f} s):"
    )
    for arm, (returns, _) in results.items():
        values = np.asarray(returns).mean(axis=1)
        print(
            f"  {arm:10s} {mean_std(values)}   per seed [{', '.join(f'{r:.1f}' for r in values)}]"
        )
    # Raw arms have no statistics; evaluation must leave the normalized arm's as trained.
    unchanged = all(
        serialization.to_bytes(state.stats) == serialization.to_bytes(statistics(runs[arm]))
        for arm, (_, state) in results.items()
        if ARMS[arm]
    )
    print(f"normalization statistics unchanged by evaluation: {'yes' if unchanged else 'NO'}")
    if "normalized" in runs:
        stds = np.asarray(statistics(runs["normalized"]).std)
        print(f"return std learned per normalized seed [{', '.join(f'{s:.3g}' for s in stds)}]")


def main(argv=None) -> int:
    """Runs the demo; returns the exit status (2 for bad input, through ``argparse``)."""
    start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    config, arms, runs = _resolve(parser, args)
    resumed = runs is not None
    num_seeds = _layout(runs)[1] if resumed else (args.seeds or DEFAULT_SEEDS)
    plot = args.plot or f"rewardnorm_demo_{config.env_name}.png"
    if not args.eval_only:
        _check_writable(parser, "--plot", plot, directory=False)

    print(
        f"rewardnorm_jax PPO demo: {config.env_name}, {' and '.join(arms)} rewards, "
        f"{num_seeds} seeds x {config.num_envs} envs per arm, "
        f"JAX {jax.__version__} on {jax.devices()[0].platform} x{jax.device_count()}",
        flush=True,
    )
    if resumed:
        print(f"restored checkpoint {os.path.join(args.checkpoint, CHECKPOINT_FILE)}")
    if args.eval_only:
        _evaluate(config, runs, args.seed)
        print(f"total wall time {time.perf_counter() - start:.1f} s")
        return 0

    if not resumed:
        runs = init_runs(config, args.seed, num_seeds, arms)
    num_runs = num_seeds * len(arms)
    print(
        f"training {num_runs} runs as one jitted program: {config.num_updates} updates of "
        f"{config.batch_size} steps ({config.num_updates * config.batch_size:,} steps per run); "
        "compiling ...",
        flush=True,
    )
    result = train(config, runs, lambda line: print(line, flush=True))
    print(
        f"compiled in {result.compile_s:.1f} s, trained in {result.train_s:.1f} s "
        f"({config.num_updates * config.batch_size * num_runs / result.train_s:,.0f} steps/s "
        "over all runs)"
    )
    print("\n".join(_table(config, result.returns)))
    _evaluate(config, result.runs, args.seed)
    print(f"learning curves: {_plot(plot, config, result.returns)}")
    if args.checkpoint is not None:
        print(f"saved checkpoint {save_checkpoint(args.checkpoint, config, result.runs)}")
    print(f"total wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
