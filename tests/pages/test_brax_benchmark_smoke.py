"""benchmarks/brax_scale.py on one variant and one seed: Brax's PPO trains on normalized rewards.

The comparison, and the learning it shows, are too long for CI (see
benchmarks/RESULTS.md, which the script's full run printed); this runs the
script's ``normalized`` variant on the inverted pendulum for one training
iteration: Brax's own PPO trains through the adapter's ``wrap_env_fn``, is
evaluated on raw returns (``RawRewardEvaluation``), and the script prints its
table and saves the curves.
"""

import numpy as np
import pytest

from benchmarks import brax_scale
from tests.pages.test_benchmarks_smoke import table_rows

pytest.importorskip("brax", reason="the brax extra is not installed")
pytest.importorskip("matplotlib", reason="the demo extra is not installed")


@pytest.mark.slow
def test_brax_ppo_trains_on_normalized_rewards_through_brax_scale(capsys, tmp_path):
    plot = tmp_path / "curves.png"
    argv = ["--envs", "inverted_pendulum", "--seeds", "1", "--num-evals", "1"]
    argv += ["--timesteps", "10240"]
    argv += ["--variants", "normalized", "--plot", str(plot), "--markdown"]
    results = brax_scale.main(argv)
    ((steps, returns, lengths, _),) = results["inverted_pendulum"]["normalized"]
    assert steps.tolist() == [10240]  # one evaluation, after training
    # Raw returns: the pendulum pays 1 per step balanced, so a return is its episode's length.
    np.testing.assert_allclose(returns, lengths, rtol=1e-5)
    assert all(0 < r <= 200 for r in returns), returns
    (row,) = table_rows(capsys.readouterr().out)
    assert row[:2] == ["inverted_pendulum", "normalized"]
    assert float(row[2].split("+-")[0]) == pytest.approx(returns[-1], abs=0.05)
    assert float(row[4]) > 0
    assert plot.stat().st_size > 0
    with pytest.raises(ValueError, match="--variants"):
        brax_scale.main(["--envs", "inverted_pendulum", "--variants", "scale=3"])
