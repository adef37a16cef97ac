"""Timing protocol shared by the benchmark scripts.

Absolute times on a shared machine move by 2-3x from run to run; ratios
between variants timed in the same process, in turn, do not. So every script
times its variants with :func:`compare`:

* every variant is called once before timing (compilation and caches stay
  outside the timed region);
* the variants then run in turn, ``A, B, C, A, B, C, ...``, so that a burst of
  background load hits all of them alike;
* every timed result is passed to ``jax.block_until_ready`` (asynchronous
  dispatch would otherwise time only the launch);
* the figure kept for each variant is the minimum over ``repeats`` (>= 20)
  calls, the least disturbed run.

A variant is a zero-argument callable returning anything (a pytree of JAX or
NumPy arrays). :func:`environment` and :func:`markdown_table` give every
script the same results header and table format.
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

MIN_REPEATS = 20


def compare(
    variants: Mapping[str, Callable[[], Any]], repeats: int = MIN_REPEATS
) -> dict[str, float]:
    """Minimum wall time in seconds of each variant, timed in alternation.

    Args:
      variants: name -> zero-argument callable; its result is blocked on.
      repeats: timed calls per variant (after one untimed warm-up call).

    Returns:
      name -> minimum seconds per call, in the order of ``variants``.
    """
    if repeats < 1:
        raise ValueError(f"repeats should be >= 1, got repeats={repeats!r}.")
    for fn in variants.values():
        jax.block_until_ready(fn())
    best = {name: float("inf") for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            best[name] = min(best[name], time.perf_counter() - start)
    return best


_KERNEL = re.compile(
    r" = .*?\b(fusion|custom-call|reduce|dot|copy|sort|scatter|gather|call|conditional|while|"
    r"dynamic-slice|dynamic-update-slice)\("
)


def _computations(text: str) -> dict[str, list[str]]:
    """The instruction lines of each computation of an HLO module's text, by name."""
    found: dict[str, list[str]] = {}
    name = None
    for line in text.split("\n"):
        header = re.match(r"(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header and not line.startswith(" "):
            name = header.group(1)
            found[name] = []
        elif line == "}":
            name = None
        elif name is not None:
            found[name].append(line)
    return found


def _kernels(computations: dict[str, list[str]], name: str) -> int:
    """Kernels one run of a computation launches; a nested loop costs its body and condition."""
    count = 0
    for line in computations[name]:
        if not _KERNEL.search(line):
            continue
        loop = re.search(r" while\(.*condition=%?([\w.\-]+), body=%?([\w.\-]+)", line)
        graph = re.search(r" call\(.*to_apply=%?(command_buffer[\w.\-]*)", line)
        if loop:
            count += _kernels(computations, loop.group(1)) + _kernels(computations, loop.group(2))
        elif graph:  # a GPU command buffer: a CUDA graph of the kernels it holds
            count += _kernels(computations, graph.group(1))
        else:
            count += 1
    return count


def _scan_body(text: str) -> str | None:
    """Name of the scan's loop body: the ``while`` with the largest known trip count."""
    loops = re.findall(r"body=%?([\w.\-]+).*?\"known_trip_count\":\{\"n\":\"(\d+)\"", text)
    return max(loops, key=lambda loop: int(loop[1]))[0] if loops else None


def loop_kernels(jitted, *args) -> int:
    """Kernels one iteration of the ``lax.scan`` in ``jitted`` launches.

    Counts the instructions of the compiled loop body that run as their own
    kernel (fusions, library calls, copies, ...) in the optimized HLO of
    ``jitted.lower(*args).compile()``. On CPU each is a separate dispatch per
    step, so this is a first-order model of a scan's per-step overhead. The
    scan is the ``while`` loop with the largest known trip count. A loop
    nested in its body costs the kernels of one trip (its condition and body),
    unless XLA:CPU compiled it into a single kernel (a small ``call``), which
    counts as one. On a GPU, a command buffer (kernels XLA launches as one
    CUDA graph) counts the kernels it holds. Returns 0 if the program has no
    such loop.
    """
    text = jitted.lower(*args).compile().as_text()
    body = _scan_body(text)
    return 0 if body is None else _kernels(_computations(text), body)


def loop_body(jitted, *args) -> dict[str, list[str]]:
    """The fused kernels of the scan's loop body in ``jitted``: name -> HLO lines.

    Each fusion of the compiled loop body (as :func:`loop_kernels` finds it)
    with the instruction lines of the computation it runs.
    """
    text = jitted.lower(*args).compile().as_text()
    computations = _computations(text)
    body = _scan_body(text)
    fused = {}
    for line in [] if body is None else computations[body]:
        match = re.search(r"%([\w.\-]+) = .*? fusion\(.*?calls=%?([\w.\-]+)", line)
        if match:
            fused[match.group(1)] = computations[match.group(2)]
    return fused


# Trace events that are not kernels of the program: the runtime's own spans and Python's.
_NOT_KERNELS = ("end:", "$", "Thunk", "Pjit", "PjRt", "while", "Handle inputs")


def kernel_profile(fn: Callable[[], Any], calls: int = 5) -> dict[str, float]:
    """Seconds per call of ``fn`` spent in each kernel, from a ``jax.profiler`` trace (XLA:CPU).

    ``fn`` runs once untraced (compilation), then ``calls`` times under the
    profiler. Each kernel's time is the sum of its trace events (on XLA:CPU,
    one per launch), divided by ``calls``; the largest first. On a GPU the
    trace also holds the host's launch events, which this sum would mix in.
    """
    import gzip
    import json
    import pathlib
    import tempfile

    jax.block_until_ready(fn())
    with tempfile.TemporaryDirectory() as directory:
        jax.profiler.start_trace(directory, create_perfetto_trace=True)
        try:
            for _ in range(calls):
                jax.block_until_ready(fn())
        finally:
            jax.profiler.stop_trace()
        (trace,) = pathlib.Path(directory).rglob("*.trace.json.gz")
        with gzip.open(trace) as f:
            events = json.load(f)["traceEvents"]
    seconds: dict[str, float] = {}
    for event in events:
        if event.get("ph") == "X" and not event["name"].startswith(_NOT_KERNELS):
            seconds[event["name"]] = seconds.get(event["name"], 0.0) + event["dur"] * 1e-6 / calls
    return dict(sorted(seconds.items(), key=lambda item: -item[1]))


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--repeats`` and ``--markdown`` to a script's parser."""
    parser.add_argument(
        "--repeats",
        type=int,
        default=MIN_REPEATS,
        help=f"timed calls per variant, alternating; the minimum is kept (default {MIN_REPEATS})",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the results as a Markdown table"
    )


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's guess)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(packages: Sequence[str] = ("jax", "jaxlib", "numpy")) -> str:
    """One line naming the machine, the JAX backend, the date and versions."""
    versions = ", ".join(f"{p} {_version(p)}" for p in packages)
    device = jax.devices()[0]
    return (
        f"{os.cpu_count()} x {cpu_model()}, JAX backend {device.platform} "
        f"({device.device_kind}), Python {platform.python_version()}, {versions}, "
        f"{datetime.date.today().isoformat()}"
    )


def command_line() -> str:
    """The command that ran this script, for the results header."""
    return "python " + " ".join([os.path.relpath(sys.argv[0]), *sys.argv[1:]])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; floats are printed with 3 significant digits."""

    def cell(value):
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The same table as aligned plain text."""
    cells = [list(headers)] + [
        [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells)


def print_results(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    markdown: bool,
    packages: Sequence[str] = ("jax", "jaxlib", "numpy"),
) -> None:
    """Prints a results table, with the machine and command header in Markdown mode."""
    if markdown:
        print(f"### {title}\n")
        print(f"Machine: {environment(packages)}  ")
        print(f"Command: `{command_line()}`\n")
        print(markdown_table(headers, rows))
        print()
    else:
        print(title)
        print(plain_table(headers, rows))
        print()
