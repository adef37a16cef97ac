"""The PPO demo: command line, progress, table, plot, learning, evaluation and checkpoints.

One short CartPole comparison (2 seeds x {normalized, raw} x 16384 steps) is
trained through the command line once per module; the tests of the demo's
functions reuse its compiled functions (same configuration, arms and number
of seeds), so the module compiles the training and evaluation functions once
each. The PPO's own switch, ``PPOConfig.normalize``, is tested on single steps.
"""

import contextlib
import dataclasses
import importlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import serialization
from matplotlib import colors, image

import rewardnorm_jax as rn
import rewardnorm_jax.gymnax as rngym
from rewardnorm_jax import demo
from rewardnorm_jax._src.core.extras import MissingExtraError
from rewardnorm_jax.examples import ppo
from tests.hang import HANG_TIMEOUT_S

SMALL_ARGS = ["--env", "CartPole-v1", "--total-steps", "16384", "--seeds", "2"]
SMALL = ppo.PPOConfig(total_steps=16384)  # what SMALL_ARGS resolve to: 32 updates of 512 steps
ARMS = ("normalized", "raw")
NUMBER = r"(-?[\d.]+) ± +([\d.]+)"


def search(pattern: str, text: str) -> re.Match[str]:
    """``re.search`` that fails the test when nothing matches."""
    found = re.search(pattern, text)
    assert found is not None, (pattern, text)
    return found


def run_main(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = demo.main(argv)
    return status, out.getvalue()


def section(output, first, last):
    """The lines from the one starting with ``first`` up to the one before ``last``."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith(last))
    return lines[start:end]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(checkpoint_dir, plot_path, output)`` of the small comparison through the CLI."""
    directory = str(tmp_path_factory.mktemp("ckpt"))
    plot = str(tmp_path_factory.mktemp("plot") / "curves.png")
    status, output = run_main([*SMALL_ARGS, "--checkpoint", directory, "--plot", plot])
    assert status == 0
    return directory, plot, output


@pytest.fixture(scope="module")
def reference(trained):
    """The same runs through the demo's functions, in memory."""
    return demo.train(SMALL, demo.init_runs(SMALL, seed=0, num_seeds=2, arms=ARMS))


def test_cli_prints_progress_and_learns(trained):
    output = trained[2]
    assert output.startswith("rewardnorm_jax PPO demo: CartPole-v1, normalized and raw rewards")
    progress = [line for line in output.splitlines() if line.startswith("update ")]
    # ceil(32 / log_lines=10) = 4: a line every 4 updates, the last at 32/32.
    assert len(progress) == 8
    assert progress[-1].startswith("update    32/32 | steps     16,384 | normalized ")
    assert all(" | raw " in line and line.endswith("steps/s") for line in progress)
    assert "normalization statistics unchanged by evaluation: yes" in output
    assert "saved checkpoint" in output
    assert "total wall time" in output
    returns = {
        arm: [float(search(arm + " +" + NUMBER, line).group(1)) for line in progress]
        for arm in ("normalized", "raw")
    }
    # The sampled policies start near random (episodes of about 20-40 steps) and
    # balance longer after 16,384 steps; the normalized arm learns faster even on
    # CartPole's unit rewards (this run measured 34 -> 151, raw 29 -> 60).
    assert returns["normalized"][0] < 40.0
    assert returns["raw"][0] < 40.0
    assert returns["normalized"][-1] > 100.0
    assert returns["raw"][-1] > 50.0


def test_table_shows_both_arms_from_the_run(trained, reference):
    table = section(trained[2], "episode return during training", "evaluation")
    assert table[0].endswith("mean ± std over 2 seeds):")
    assert table[1].split() == ["steps", "|", "normalized", "|", "raw"]
    rows = table[3:]
    # Updates round(f * 32) for f in 0.1, 0.25, 0.5, 0.75, 1 of the run.
    updates = [3, 8, 16, 24, 32]
    assert [row.split("|")[0].strip() for row in rows] == [f"{u * 512:,}" for u in updates]
    curves = reference.returns  # per arm, (seeds, updates)
    assert list(curves) == ["normalized", "raw"]
    assert all(arm.shape == (2, 32) for arm in curves.values())
    for row, update in zip(rows, updates, strict=True):
        cells = [re.fullmatch(" *" + NUMBER + " *", cell) for cell in row.split("|")[1:]]
        for cell, arm in zip(cells, curves.values(), strict=True):
            values = arm[:, update - 1]
            assert cell is not None, row
            assert cell.groups() == (f"{values.mean():.2f}", f"{values.std():.2f}")


def test_plot_is_a_png_of_both_arms(trained):
    _, plot, output = trained
    assert f"learning curves: {plot}" in output
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(plot)[..., :3]
    assert pixels.shape == (440, 770, 3)  # 7 x 4 inches at 110 dpi
    for color in ("C0", "C3"):  # the two arms' mean curves
        rgb = np.array(colors.to_rgb(color))
        assert np.any(np.all(np.abs(pixels - rgb) < 0.02, axis=-1))


PENDULUM_RAW = dataclasses.replace(ppo.PENDULUM, normalize=False)


def _pendulum_step(config, freeze=False):
    """One step of 16 fresh Pendulum environments: ``(state, reward, environment's reward)``."""
    env = ppo.make_env(config)
    env_state = jax.jit(ppo.make_init(config))(jax.random.PRNGKey(3)).env_state
    if freeze:
        env_state = rngym.set_update_stats(env_state, False)
    key = jax.random.PRNGKey(4)
    action = jax.random.uniform(key, (16, 1), minval=-2.0, maxval=2.0)
    keys = jax.random.split(key, 16)
    _, state, reward, *_ = env.env.step(keys, env_state, action, env.params)
    inner = env.env._env.step(keys, env_state.env_state, action, env.params)
    return state, reward, inner[2]


def test_normalize_switch_selects_normalized_or_raw_rewards():
    """``normalize=False`` passes the environment's rewards through unchanged, bit-exactly."""
    raw_state, raw, inner = _pendulum_step(PENDULUM_RAW)
    assert np.any(np.asarray(inner) < -1.0)  # Pendulum costs, far from unit scale
    np.testing.assert_array_equal(raw, inner)
    assert isinstance(rngym.get_transform_state(raw_state), rn.EmptyState)  # no statistics
    # normalize=True: divided by the std of the discounted return, learned from this step.
    state, normalized, inner = _pendulum_step(ppo.PENDULUM)
    np.testing.assert_array_equal(inner, raw)  # the same environments and actions
    stats = rngym.get_transform_state(state).stats
    assert rn.count_as_int(stats) == 16
    np.testing.assert_allclose(normalized, inner / np.sqrt(float(stats.var) + 1e-8), rtol=1e-6)
    assert np.all(np.abs(np.asarray(normalized)) < np.abs(np.asarray(inner)))
    # The normalizer frozen at its prior (variance 1) passes rewards unchanged as well,
    # since r / sqrt(1 + 1e-8) == r in float32: both ways of running raw give one result.
    _, frozen, _ = _pendulum_step(ppo.PENDULUM, freeze=True)
    np.testing.assert_array_equal(frozen, raw)


def test_raw_arm_keeps_no_statistics_normalized_arm_learns(reference):
    runs = reference.runs
    assert list(runs) == ["normalized", "raw"]
    assert isinstance(rngym.get_transform_state(runs["raw"].env_state), rn.EmptyState)
    np.testing.assert_array_equal(rn.count_as_int(demo.statistics(runs["normalized"])), 16384)
    assert np.all(np.asarray(demo.statistics(runs["normalized"]).var) > 1.0)


def test_checkpoint_holds_the_run_bit_exactly(trained, reference):
    directory = trained[0]
    config, runs = demo.load_checkpoint(directory)
    assert config == SMALL
    assert list(runs) == ["normalized", "raw"]
    # The checkpointed state is exactly the in-memory state of the same run
    # (parameters, optimizer, environments, normalizer statistics and returns, keys).
    assert serialization.to_bytes(runs) == serialization.to_bytes(reference.runs)
    stats = demo.statistics(runs["normalized"])
    assert stats.count_lo.dtype == np.uint32
    assert stats.count_hi.dtype == np.uint32
    # Saving what was loaded rewrites identical files.
    copy = os.path.join(directory, "resaved")
    demo.save_checkpoint(copy, config, runs)
    for name in (demo.CHECKPOINT_FILE, demo.CONFIG_FILE):
        with (
            open(os.path.join(directory, name), "rb") as saved,
            open(os.path.join(copy, name), "rb") as resaved,
        ):
            assert saved.read() == resaved.read()


def test_checkpoint_is_the_library_format_with_the_config_checked(trained, tmp_path):
    directory = str(tmp_path / "edited")
    shutil.copytree(trained[0], directory)
    with open(os.path.join(directory, demo.CHECKPOINT_FILE), "rb") as f:
        data = f.read()
    _, runs = demo.load_checkpoint(directory)
    # Any rewardnorm_jax state reader restores it, given the template and metadata.
    restored = rn.load_state(runs, data)
    assert serialization.to_bytes(restored) == serialization.to_bytes(runs)
    # A config.json that no longer describes the state is refused, naming the field.
    path = os.path.join(directory, demo.CONFIG_FILE)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"gamma": 0.99', '"gamma": 0.9'))
    with pytest.raises(
        ValueError, match=r"metadata 'gamma': checkpoint has 0\.99, expected 0\.9\b"
    ):
        demo.load_checkpoint(directory)
    # One that names other arms or seeds than the checkpoint holds, likewise.
    with open(path, "w") as f:
        f.write(text.replace('"num_seeds": 2', '"num_seeds": 3'))
    with pytest.raises(ValueError, match=r"has 'float32\[2, 4\]', expected 'float32\[3, 4\]'"):
        demo.load_checkpoint(directory)
    with open(path, "w") as f:
        f.write(text.replace('"arms": "normalized+raw"', '"arms": "raw"'))
    with pytest.raises(ValueError, match="checkpoint does not match the template"):
        demo.load_checkpoint(directory)


def test_resumed_run_equals_uninterrupted_continuation(trained, reference, tmp_path):
    directory = str(tmp_path / "resume")
    shutil.copytree(trained[0], directory)
    status, output = run_main(["--checkpoint", directory, "--plot", str(tmp_path / "p.png")])
    assert status == 0
    assert "restored checkpoint" in output
    _, resumed = demo.load_checkpoint(directory)
    continued = demo.train(SMALL, reference.runs)
    assert serialization.to_bytes(resumed) == serialization.to_bytes(continued.runs)
    # The normalized runs' statistics kept growing from the restored count.
    counts = rn.count_as_int(demo.statistics(resumed["normalized"]))
    np.testing.assert_array_equal(counts, [2 * 16384, 2 * 16384])


def test_eval_only_restores_and_leaves_checkpoint_untouched(trained):
    directory, _, train_output = trained
    path = os.path.join(directory, demo.CHECKPOINT_FILE)
    with open(path, "rb") as f:
        before = f.read()
    status, output = run_main(["--checkpoint", directory, "--eval-only"])
    assert status == 0
    assert "update " not in output  # no training
    # Same agents and statistics restored: the same evaluation, to the printed digit.
    evaluation = section(output, "evaluation", "normalization statistics")
    assert evaluation[1:] == section(train_output, "evaluation", "normalization statistics")[1:]
    assert [line.split()[0] for line in evaluation[1:]] == ["normalized", "raw"]
    assert "normalization statistics unchanged by evaluation: yes" in output
    with open(path, "rb") as f:
        assert f.read() == before


def test_evaluation_freezes_and_keeps_statistics(reference):
    runs = reference.runs
    results = demo.evaluate(SMALL, runs)
    assert list(results) == ["normalized", "raw"]
    for returns, _ in results.values():
        assert returns.shape == (2, SMALL.num_eval_envs)
        assert np.all(np.asarray(returns) >= 1.0)
    returns, states = results["normalized"]
    trained_stats = demo.statistics(runs["normalized"])
    assert serialization.to_bytes(states.stats) == serialization.to_bytes(trained_stats)
    # Evaluation did step fresh environments through the normalizer: their own
    # discounted returns accumulated while the statistics stayed frozen.
    assert states.ret.shape == (2, SMALL.num_eval_envs)
    assert np.all(np.asarray(states.ret) > 0.0)
    assert isinstance(results["raw"][1], rn.EmptyState)
    # Seed i of each arm evaluates on the same episodes: one arm alone gives
    # the same returns as in the comparison.
    raw_only = demo.evaluate(SMALL, {"raw": runs["raw"]})
    np.testing.assert_array_equal(raw_only["raw"][0], results["raw"][0])


def test_single_arm_options(trained, tmp_path):
    """``--no-compare`` trains the normalized arm only, ``--no-normalize`` the raw arm only."""
    for flag, label in (("--no-compare", "normalized"), ("--no-normalize", "raw")):
        plot = str(tmp_path / f"{label}.png")
        args = ["--env", "CartPole-v1", "--total-steps", "512", "--seeds", "1", "--plot", plot]
        status, output = run_main([*args, flag])
        assert status == 0
        assert f"CartPole-v1, {label} rewards, 1 seeds" in output
        table = section(output, "episode return during training", "evaluation")
        assert table[1].split() == ["steps", "|", label]
        assert os.path.getsize(plot) > 0


@pytest.mark.parametrize("arms", [(), "raw", ("raw", "raw"), ("normalised",), [True, False]])
def test_init_runs_rejects_bad_arms(arms):
    with pytest.raises(ValueError, match="arms should be a non-empty sequence of distinct labels"):
        demo.init_runs(SMALL, 0, 1, arms=arms)
    with pytest.raises(ValueError, match=re.escape(f"got {arms!r}")):
        demo.init_runs(SMALL, 0, 1, arms=arms)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "CartPol"], "valid names: CartPole-v1, Pendulum-v1"),
        (["--total-steps", "0"], "--total-steps: must be a positive integer, got 0"),
        (["--total-steps", "-100"], "--total-steps: must be a positive integer, got -100"),
        (["--total-steps", "many"], "--total-steps: must be a positive integer, got 'many'"),
        (["--total-steps", "100"], "total_steps=100 is less than one update"),
        (["--num-envs", "0"], "--num-envs: must be a positive integer"),
        (["--seeds", "0"], "--seeds: must be a positive integer"),
        (["--seed", "-1"], "--seed: must be a non-negative integer"),
        (["--eval-only"], "--eval-only needs --checkpoint DIR"),
        (["--eval-only", "--checkpoint", "{empty}"], "none at {empty}"),
        (["--checkpoint", "{trained}", "--env", "Pendulum-v1"], "does not match the checkpoint"),
        (["--checkpoint", "{trained}", "--seeds", "3"], "does not match the checkpoint"),
        (
            ["--checkpoint", "{trained}", "--no-normalize"],
            "--no-normalize (checkpoint: normalized+raw",
        ),
        (["--checkpoint", "{trained}", "--no-compare"], "--no-compare (checkpoint: normalized+raw"),
        (
            ["--checkpoint", "{corrupt}"],
            "cannot read the checkpoint {corrupt}/checkpoint.msgpack: ",
        ),
        (
            ["--checkpoint", "{no_config}"],
            "cannot read the checkpoint {no_config}/checkpoint.msgpack",
        ),
        (["--plot", "{empty}"], "--plot {empty} is a directory; give a file name"),
        (["--plot", "{a_file}/sub.png"], "cannot write to {a_file}"),
        (["--checkpoint", "{a_file}"], "--checkpoint {a_file} is a file; give a directory"),
        (["--checkpoint", "{a_file}/sub"], "cannot write to {a_file}"),
    ],
)
def test_bad_input_exits_2_with_message(argv, message, trained, tmp_path, capsys):
    corrupt = tmp_path / "corrupt"  # a config, and a checkpoint that is not one
    shutil.copytree(trained[0], corrupt)
    (corrupt / demo.CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    no_config = tmp_path / "no_config"  # a checkpoint without its config.json
    no_config.mkdir()
    shutil.copy(os.path.join(trained[0], demo.CHECKPOINT_FILE), no_config)
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    names = {
        "empty": str(tmp_path),
        "trained": trained[0],
        "corrupt": str(corrupt),
        "no_config": str(no_config),
        "a_file": str(a_file),
    }
    argv = [arg.format(**names) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        demo.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message.format(**names) in err
    assert err.startswith("usage: python -m rewardnorm_jax.demo")


def test_command_line_exit_status():
    result = subprocess.run(
        [sys.executable, "-m", "rewardnorm_jax.demo", "--env", "Nope-v0"],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
    )
    assert result.returncode == 2
    assert "--env 'Nope-v0' is not a supported gymnax environment" in result.stderr
    assert "Pendulum-v1" in result.stderr
    assert result.stdout == ""


def test_installed_command_runs_the_demo():
    """The ``rewardnorm-demo`` console script is the same entry point as ``python -m``."""
    (script,) = [
        ep
        for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.name == "rewardnorm-demo"
    ]
    assert script.value == "rewardnorm_jax.demo:main"
    path = shutil.which("rewardnorm-demo", path=os.path.dirname(sys.executable))
    assert path is not None, "rewardnorm-demo is not installed beside the interpreter"
    result = subprocess.run(
        [path, "--total-steps", "0"], capture_output=True, text=True, timeout=HANG_TIMEOUT_S
    )
    assert result.returncode == 2
    assert "--total-steps" in result.stderr


def _equations(jaxpr):
    """Every equation of ``jaxpr``, including those of nested jaxprs (jit, scan, cond...)."""
    for equation in jaxpr.eqns:
        yield equation
        for param in equation.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    yield from _equations(inner if hasattr(inner, "eqns") else inner.jaxpr)


def test_initialisation_factorizes_one_matrix_at_a_time():
    """Batched QR (a vmapped orthogonal init) deadlocks jaxlib's two-thread CPU pool."""
    init = demo._jitted_init(SMALL)
    jaxpr = jax.make_jaxpr(init)(jax.random.PRNGKey(0)).jaxpr
    shapes = [
        var.aval.shape for eq in _equations(jaxpr) if eq.primitive.name == "qr" for var in eq.invars
    ]
    assert shapes
    assert all(len(shape) == 2 for shape in shapes)
    runs = demo.init_runs(SMALL, seed=0, num_seeds=3, arms=ARMS)
    assert jax.tree.structure(runs) == jax.tree.structure(demo._run_shapes(SMALL, ARMS, 3))  # type: ignore[operator, unused-ignore]  # jax's PyTreeDef is opaque to mypy
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(runs))
    # Seed i of both arms starts from the same networks and environments.
    for arm, other in zip(*(jax.tree.leaves(runs[a].params) for a in ARMS), strict=True):
        np.testing.assert_array_equal(arm, other)
    np.testing.assert_array_equal(runs["normalized"].obs, runs["raw"].obs)
    assert not np.array_equal(runs["raw"].obs[0], runs["raw"].obs[1])  # seeds differ


class NotInstalled:
    """A module finder that finds ``name`` nowhere, as if it were not installed."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name or name.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None  # let the other finders look


def test_demo_without_matplotlib_names_the_extra(monkeypatch):
    for name in list(sys.modules):
        if name.startswith(("rewardnorm_jax.demo", "matplotlib")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled("matplotlib"), *sys.meta_path])
    expected = "rewardnorm_jax.demo needs matplotlib, which is not installed: "
    expected += 'pip install "rewardnorm-jax[demo]"'
    with pytest.raises(MissingExtraError, match=re.escape(expected)):
        importlib.import_module("rewardnorm_jax.demo")
