"""Benchmark scripts, each run from the repository root as ``python -m benchmarks.<name>``.

They print ratios measured side by side in one run (``_timing.py`` says how); the
results and the commands that made them are in ``RESULTS.md``.
"""
