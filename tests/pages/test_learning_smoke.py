"""Smoke run of benchmarks/learning.py: both agents, tiny runs, 2 seeds.

The comparison itself takes minutes (``python -m benchmarks.learning``); this
trains Q-learning on Catch and PPO on the growing-reward CartPole, raw and
with PopArt (which the two agents implement apart from the reward
transforms), for two evaluation points with fast compilation (4 programs,
each a few seconds to compile on two cores), and
checks what ``main`` returns and prints: one finite curve per seed for every
pair, evaluation returns in the environment's own units whatever the
transform, the table and the plot.
"""

import contextlib
import importlib
import io

import jax.numpy as jnp
import numpy as np
import pytest

from tests.pages.test_benchmarks_smoke import table_rows

# benchmarks.learning imports gymnax, optax and matplotlib: the demo extra.
pytestmark = pytest.mark.requires("gymnax", "optax", "matplotlib")
CASES, TRANSFORMS = ["catch", "growing"], ["none", "popart"]
SMOKE_ARGS = ["--smoke", "--cases", *CASES, "--transforms", *TRANSFORMS]


def learning():
    return importlib.import_module("benchmarks.learning")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``(results, printed output, plot path)`` of one ``--smoke`` run."""
    plot = tmp_path_factory.mktemp("learning") / "learning.png"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        results = learning().main([*SMOKE_ARGS, "--markdown", "--plot", str(plot)])
    return results, out.getvalue(), plot


@pytest.mark.slow
def test_one_finite_curve_per_seed_for_every_pair(smoke):
    results, _, _ = smoke
    cases = learning().make_cases("smoke")
    assert list(results) == CASES
    for name, by_transform in results.items():
        assert list(by_transform) == TRANSFORMS
        for result in by_transform.values():
            assert result.curves.shape == (2, cases[name].num_evals)
            assert np.isfinite(result.curves).all()
            assert result.compile_s > 0
            assert result.train_s > 0


@pytest.mark.slow
def test_returns_are_in_the_environments_units(smoke):
    results, _, _ = smoke
    cases = learning().make_cases("smoke")
    catch = cases["catch"]
    for transform, result in results["catch"].items():
        # Each evaluation averages episodes of +-10,000 (Catch x10,000), whatever the
        # transform did to the training rewards (clip: +-10, symlog: +-9.2).
        episodes = result.curves * catch.eval_envs / 1e4
        np.testing.assert_allclose(episodes, np.round(episodes), atol=1e-3, err_msg=transform)
        assert np.abs(episodes).max() <= catch.eval_envs, transform
    for transform, result in results["growing"].items():
        # CartPole's unscaled reward: 1 per step, at most 500 steps (the training reward
        # grows to x1000).
        assert (result.curves >= 1).all(), transform
        assert (result.curves <= 500).all(), transform


@pytest.mark.slow
def test_table_and_plot(smoke):
    results, out, plot = smoke
    for text in ("Command:", "gymnax", "Wall time per case:"):
        assert text in out
    rows = table_rows(out)
    expected = [(case, transform) for case in results for transform in results[case]]
    assert [(row[0], row[1]) for row in rows] == expected
    for row in rows:
        assert row[2] == "2", row  # seeds
        for cell in row[3:5]:  # final return, mean over the curve: "mean ± std"
            mean, std = (float(x.replace(",", "")) for x in cell.split("±"))
            assert np.isfinite(mean), row
            assert std >= 0, row
    assert plot.stat().st_size > 0


def test_scale_reward_grows_geometrically():
    scale = learning().ScaleReward(None, 1.0, 1000.0, steps=100)
    factors = scale.factor(jnp.array([0, 50, 100, 200]))
    np.testing.assert_allclose(factors, [1.0, 1000**0.5, 1000.0, 1000.0], rtol=1e-5)


def test_unknown_transform():
    with pytest.raises(ValueError, match="valid names"):
        learning().reward_transform("scale", 0.99)
