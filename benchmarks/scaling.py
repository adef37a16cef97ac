"""The step against the naive normalizer at every scale, from 1 to a million environments.

For each ``N`` of ``--sizes`` (default 1, 8, 64, 1024, 4096, 16384, 65536,
262144 and 1048576) the scans of ``stream.py`` run side by side on one
stream, in turn (``_timing.compare``):

* ``default``: ``normalize_reward``'s ``step(state, r, terminated, False)``;
* ``active``: the same step with Gymnasium's ``active`` mask (the masks of every step
  made before the timed scan, as a training loop holds each from the step before);
* ``fast``: the step built with ``finite_rewards=True``, without a mask;
* ``plain`` (on XLA:CPU) or ``tuned`` (elsewhere): ``default`` traced with
  the summation the backend does not default to (``summation.everywhere``):
  what the CPU tuning buys there, or would do on an accelerator;
* ``naive``: PureJaxRL's ``NormalizeVecReward`` arithmetic;
* ``copy``: a plain copy of the arrays the step reads (rewards and ends), the
  bandwidth any step is measured against.

The stream length shrinks as ``N`` grows (``T = clip(2^24 / N, 16,
--steps)``); times are per step. ``GB/s`` is the bytes a step must move
(per environment: the reward and the end flag read, the return read and
written, the output written; the ``active`` mask read too) over its time,
and ``/copy`` that figure over the copy's. ``compile`` is the seconds
``lower(...).compile()`` takes, over the naive step's.

With ``--profile``, it prints instead, for each ``N``, the nanoseconds per
step each kernel of the ``default``, ``active`` and ``naive`` scans takes
(``_timing.kernel_profile``, on XLA:CPU): where a step's time goes.

Usage::

    python -m benchmarks.scaling                     # N = 1 ... 1048576
    python -m benchmarks.scaling --sizes 64 4096 --markdown
    python -m benchmarks.scaling --sizes 1 64 4096 1048576 16777216   # on a GPU
    python -m benchmarks.scaling --sizes 8 1024 --profile
"""

import argparse
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks._timing import (
    add_common_args,
    compare,
    kernel_profile,
    loop_kernels,
    print_results,
)
from benchmarks.stream import (
    default_scan,
    fast_scan,
    make_stream,
    naive_scan,
    next_step_active,
    ours_scan,
)
from rewardnorm_jax._src.stats import summation

MAX_ELEMENTS = 2**24  # T * N of the largest stream
SIZES = (1, 8, 64, 1024, 4096, 16384, 65536, 262144, 1048576)
FLOAT, FLAG = 4, 1  # bytes per reward (float32) and per end flag
# Bytes one environment's step must move: reward, end and return read, return and output written.
STEP_BYTES = FLOAT + FLAG + 2 * FLOAT + FLOAT
COPY_BYTES = 2 * (FLOAT + FLAG)  # the copy reads and writes the rewards and ends


@jax.jit
def copy_arrays(rewards, terminated):
    """A plain copy of the stream's rewards and ends."""
    return jnp.copy(rewards), jnp.copy(terminated)


def other_form() -> str:
    """The summation the backend does not default to: plain on XLA:CPU, tuned elsewhere."""
    return "plain" if jax.default_backend() == "cpu" else "tuned"


@jax.jit
def other_scan(rewards, terminated):
    """``default_scan``, to be traced inside ``summation.everywhere(other_form())``."""
    return default_scan.__wrapped__(rewards, terminated)


def scan_of(scan, *args) -> Callable[[], Any]:
    """A variant of ``compare``: ``scan`` of the stream."""
    return lambda: scan(*args)


def run_other(rewards, terminated):
    with summation.everywhere(other_form()):
        return other_scan(rewards, terminated)


def steps_for(num_envs: int, max_steps: int) -> int:
    """Stream length for ``num_envs`` environments: at most ``MAX_ELEMENTS`` rewards."""
    return int(min(max(MAX_ELEMENTS // num_envs, 16), max_steps))


def compile_seconds(jitted, *args) -> float:
    """Seconds to trace, lower and compile ``jitted``'s function afresh (the least of three)."""
    best = float("inf")
    for _ in range(3):
        fresh = jax.jit(lambda *a: jitted.__wrapped__(*a))
        start = time.perf_counter()
        fresh.lower(*args).compile()
        best = min(best, time.perf_counter() - start)
    return best


SCANS = {"default": default_scan, "active": ours_scan, "fast": fast_scan, "naive": naive_scan}


def scan_inputs(num_envs: int, steps: int) -> dict[str, tuple]:
    """Each scan's arguments on one stream: the ``active`` scan takes the masks too."""
    rewards, terminated = (jnp.asarray(a) for a in make_stream(steps, num_envs))
    inputs: dict[str, tuple] = dict.fromkeys(SCANS, (rewards, terminated))
    inputs["active"] = (rewards, terminated, next_step_active(terminated))
    return inputs


def measure(num_envs: int, steps: int, repeats: int) -> list:
    """One row of the table for ``num_envs`` environments."""
    inputs = scan_inputs(num_envs, steps)
    rewards, terminated = inputs["default"]
    variants = {name: scan_of(scan, *inputs[name]) for name, scan in SCANS.items()}
    variants["other"] = scan_of(run_other, rewards, terminated)
    seconds = compare(variants, repeats)
    # The copy sweeps the caches, which would slow whichever scan runs after
    # it: it is timed against the default step alone, in a group of its own.
    against_copy = compare(
        {"default": variants["default"], "copy": scan_of(copy_arrays, rewards, terminated)}, repeats
    )
    ns = {name: t / steps * 1e9 for name, t in seconds.items()}
    elements = steps * num_envs
    copy_rate = COPY_BYTES * elements / against_copy["copy"]
    default_rate = STEP_BYTES * elements / against_copy["default"]
    rates = {
        name: default_rate
        * (STEP_BYTES + FLAG * (name == "active"))
        / STEP_BYTES
        * seconds["default"]
        / seconds[name]
        for name in ("default", "active", "fast", "naive")
    }
    kernels = {name: loop_kernels(scan, *inputs[name]) for name, scan in SCANS.items()}
    compiles = {name: compile_seconds(scan, *inputs[name]) for name, scan in SCANS.items()}
    return [
        num_envs,
        steps,
        ns["naive"],
        ns["default"] - ns["naive"],
        ns["default"] / ns["naive"],
        ns["active"] / ns["naive"],
        ns["fast"] / ns["naive"],
        ns["other"] / ns["naive"],
        "/".join(str(kernels[name]) for name in ("default", "active", "fast", "naive")),
        rates["default"] / 1e9,
        rates["default"] / copy_rate,
        rates["active"] / copy_rate,
        rates["fast"] / copy_rate,
        rates["naive"] / copy_rate,
        max(compiles[name] for name in ("default", "active", "fast")) / compiles["naive"],
    ]


def print_profile(num_envs: int, steps: int, top: int = 8) -> None:
    """Each profiled scan's kernels at ``num_envs``: nanoseconds per step, the largest first."""
    inputs = scan_inputs(num_envs, steps)
    for name in ("default", "active", "naive"):
        kernels = kernel_profile(scan_of(SCANS[name], *inputs[name]))
        ns = {kernel: t / steps * 1e9 for kernel, t in kernels.items()}
        shown = ", ".join(f"{kernel} {t:.0f}" for kernel, t in list(ns.items())[:top])
        print(f"N={num_envs} {name}: {sum(ns.values()):.0f} ns/step in kernels: {shown}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(SIZES), help="numbers of environments N"
    )
    parser.add_argument(
        "--steps", type=int, default=1000, help="stream length T for small N (default 1000)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print each scan's kernels instead of the table (XLA:CPU)",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.profile:
        for n in args.sizes:
            print_profile(n, steps_for(n, args.steps))
        return
    headers = [
        "N",
        "T",
        "naive ns/step",
        "default - naive ns",
        "default/naive",
        "active/naive",
        "fast/naive",
        f"{other_form()}/naive",
        "kernels default/active/fast/naive",
        "default GB/s",
        "default /copy",
        "active /copy",
        "fast /copy",
        "naive /copy",
        "compile ours/naive (worst)",
    ]
    rows = [measure(n, steps_for(n, args.steps), args.repeats) for n in args.sizes]
    print_results("The step at every scale, float32", headers, rows, args.markdown)


if __name__ == "__main__":
    main()
