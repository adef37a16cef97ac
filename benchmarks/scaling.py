"""Time per step of reward normalization as the number of environments grows.

The ``floor``, ``ours``, ``default``, ``fast`` and ``naive`` scans of ``stream.py`` (same stream
construction, same code) for ``N`` = 1, 4, 16, ... up to ``--max-envs``
(default 2^20, about a million; 2^20 x 16 steps takes about 150 MB). The
stream length shrinks as ``N`` grows (``T = clip(2^24 / N, 16, --steps)``) so
every stream fits in memory; the figure kept is per step.

Read the ``ns/env-step`` columns: while they fall as ``N`` doubles, the cost
per step is a fixed overhead (kernel launches, loop bookkeeping); where they
level off, the cost has become linear in ``N`` (memory traffic).

Usage::

    python -m benchmarks.scaling                     # N = 1 ... 1048576
    python -m benchmarks.scaling --max-envs 65536 --markdown
"""

import argparse

import jax.numpy as jnp

from benchmarks._timing import add_common_args, compare, print_results
from benchmarks.stream import (
    default_scan,
    fast_scan,
    floor_scan,
    make_stream,
    naive_scan,
    ours_scan,
)

MAX_ELEMENTS = 2**24  # T * N of the largest stream


def steps_for(num_envs: int, max_steps: int) -> int:
    """Stream length for ``num_envs`` environments: at most ``MAX_ELEMENTS`` rewards."""
    return int(min(max(MAX_ELEMENTS // num_envs, 16), max_steps))


def measure(num_envs: int, steps: int, repeats: int) -> dict:
    """Microseconds per step of each scan."""
    rewards, terminated = (jnp.asarray(a) for a in make_stream(steps, num_envs))
    times = compare(
        {
            "floor": lambda: floor_scan(rewards),
            "ours": lambda: ours_scan(rewards, terminated),
            "default": lambda: default_scan(rewards, terminated),
            "fast": lambda: fast_scan(rewards, terminated),
            "naive": lambda: naive_scan(rewards, terminated),
        },
        repeats,
    )
    return {name: seconds / steps * 1e6 for name, seconds in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--max-envs",
        type=int,
        default=2**20,
        help="largest N; N runs over the powers of 4 up to it (default 1048576)",
    )
    parser.add_argument(
        "--steps", type=int, default=1000, help="stream length T for small N (default 1000)"
    )
    add_common_args(parser)
    args = parser.parse_args(argv)

    headers = [
        "N",
        "T",
        "floor us/step",
        "ours us/step",
        "default us/step",
        "fast us/step",
        "naive us/step",
        "floor ns/env-step",
        "ours ns/env-step",
        "ours/naive",
        "default/naive",
        "fast/naive",
        "ours/floor",
        "naive/floor",
    ]
    rows = []
    num_envs = 1
    while num_envs <= args.max_envs:
        steps = steps_for(num_envs, args.steps)
        us = measure(num_envs, steps, args.repeats)
        rows.append(
            [
                num_envs,
                steps,
                us["floor"],
                us["ours"],
                us["default"],
                us["fast"],
                us["naive"],
                us["floor"] / num_envs * 1e3,
                us["ours"] / num_envs * 1e3,
                us["ours"] / us["naive"],
                us["default"] / us["naive"],
                us["fast"] / us["naive"],
                us["ours"] / us["floor"],
                us["naive"] / us["floor"],
            ]
        )
        num_envs *= 4
    print_results("Scaling with the number of environments, float32", headers, rows, args.markdown)


if __name__ == "__main__":
    main()
