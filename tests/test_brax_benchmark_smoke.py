"""Smoke run of benchmarks/brax_scale.py: one variant, one seed, a few hundred steps.

The learning comparison itself is too long for CI (see benchmarks/RESULTS.md);
this checks that the script trains Brax's PPO through the adapter, evaluates
raw returns, prints its table and saves the curves.
"""

import pytest

from tests.test_benchmarks_smoke import run_main, table_rows

pytest.importorskip("brax", reason="the brax extra is not installed")
pytest.importorskip("matplotlib", reason="the demo extra is not installed")


def test_brax_scale(capsys, tmp_path):
    plot = tmp_path / "curves.png"
    argv = ["--envs", "inverted_pendulum", "--seeds", "1", "--timesteps", "640"]
    argv += ["--num-evals", "2", "--variants", "normalized", "--plot", str(plot), "--markdown"]
    out = run_main("brax_scale", argv, capsys)
    (row,) = table_rows(out)
    assert row[:2] == ["inverted_pendulum", "normalized"]
    for cell in row[2:4]:  # raw returns: steps balanced, at most the 200-step episode
        mean, std = (float(x) for x in cell.split("+-"))
        assert 0 < mean <= 200, row
        assert std >= 0, row
    assert float(row[4]) > 0
    assert plot.stat().st_size > 0
    with pytest.raises(ValueError, match="--variants"):
        run_main("brax_scale", ["--envs", "inverted_pendulum", "--variants", "scale=3"], capsys)
