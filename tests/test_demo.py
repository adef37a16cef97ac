"""The PPO demo: command line, progress, table, plot, learning, evaluation and checkpoints.

One short CartPole comparison (2 seeds x {normalized, raw} x 16384 steps) is
trained through the command line once per module; the library-level tests
reuse its compiled functions (same configuration and number of runs), so the
module compiles the training and evaluation functions once each.
"""

import contextlib
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
from rewardnorm_jax.examples import ppo

SMALL_ARGS = ["--env", "CartPole-v1", "--total-steps", "16384", "--seeds", "2"]
SMALL = ppo.PPOConfig(total_steps=16384)  # what SMALL_ARGS resolve to: 32 updates of 512 steps
ARMS = (True, False)
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
    """The same runs through the library API, in memory."""
    return ppo.train(SMALL, ppo.init_runners(SMALL, seed=0, num_seeds=2, normalize=ARMS))


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
    curves = np.asarray(reference.metrics.episode_return)  # (runs, updates), arm by arm
    for row, update in zip(rows, updates, strict=True):
        cells = [re.fullmatch(" *" + NUMBER + " *", cell) for cell in row.split("|")[1:]]
        for cell, arm in zip(cells, (curves[:2], curves[2:]), strict=True):
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


def test_raw_arm_sees_the_environment_rewards_unchanged(reference):
    """The raw arm's statistics stay at the prior (variance 1): rewards pass bit-exactly."""
    env = ppo.make_env(ppo.default_config("Pendulum-v1"))
    runner = ppo.init_runner(
        ppo.default_config("Pendulum-v1"), env, jax.random.PRNGKey(3), normalize=False
    )
    key = jax.random.PRNGKey(4)
    action = jax.random.uniform(key, (16, 1), minval=-2.0, maxval=2.0)
    keys = jax.random.split(key, 16)
    _, state, reward, *_ = env.env.step(keys, runner.env_state, action, env.params)
    inner = env.env._env.step(keys, runner.env_state.env_state, action, env.params)
    assert np.any(np.asarray(inner[2]) < -1.0)  # Pendulum costs, far from unit scale
    np.testing.assert_array_equal(reward, inner[2])
    assert rn.count_as_int(rngym.get_transform_state(state).stats) == 0
    # In the trained comparison, the raw runs' statistics never left the prior.
    stats = ppo.norm_state(reference.runners).stats
    np.testing.assert_array_equal(ppo.normalizes(reference.runners), [True, True, False, False])
    np.testing.assert_array_equal(rn.count_as_int(stats), [16384, 16384, 0, 0])
    np.testing.assert_array_equal(np.asarray(stats.var)[2:], 1.0)


def test_checkpoint_holds_the_run_bit_exactly(trained, reference):
    directory = trained[0]
    config, runners = ppo.load_checkpoint(directory)
    assert config == SMALL
    # The checkpointed state is exactly the in-memory state of the same run
    # (parameters, optimizer, environments, normalizer statistics and returns, keys).
    assert serialization.to_bytes(runners) == serialization.to_bytes(reference.runners)
    stats = ppo.norm_state(runners).stats
    assert stats.count_lo.dtype == np.uint32
    assert stats.count_hi.dtype == np.uint32
    # Saving what was loaded rewrites identical files.
    copy = os.path.join(directory, "resaved")
    ppo.save_checkpoint(copy, config, runners)
    for name in (ppo.CHECKPOINT_FILE, ppo.CONFIG_FILE):
        with (
            open(os.path.join(directory, name), "rb") as saved,
            open(os.path.join(copy, name), "rb") as resaved,
        ):
            assert saved.read() == resaved.read()


def test_checkpoint_is_the_library_format_with_the_config_checked(trained, tmp_path):
    directory = str(tmp_path / "edited")
    shutil.copytree(trained[0], directory)
    with open(os.path.join(directory, ppo.CHECKPOINT_FILE), "rb") as f:
        data = f.read()
    _, runners = ppo.load_checkpoint(directory)
    # Any rewardnorm_jax state reader restores it, given the template and metadata.
    restored = rn.load_state(runners, data)
    assert serialization.to_bytes(restored) == serialization.to_bytes(runners)
    # A config.json that no longer describes the state is refused, naming the field.
    path = os.path.join(directory, ppo.CONFIG_FILE)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"gamma": 0.99', '"gamma": 0.9'))
    with pytest.raises(
        ValueError, match=r"metadata 'gamma': checkpoint has 0\.99, expected 0\.9\b"
    ):
        ppo.load_checkpoint(directory)


def test_resumed_run_equals_uninterrupted_continuation(trained, reference, tmp_path):
    directory = str(tmp_path / "resume")
    shutil.copytree(trained[0], directory)
    status, output = run_main(["--checkpoint", directory, "--plot", str(tmp_path / "p.png")])
    assert status == 0
    assert "restored checkpoint" in output
    _, resumed = ppo.load_checkpoint(directory)
    continued = ppo.train(SMALL, reference.runners)
    assert serialization.to_bytes(resumed) == serialization.to_bytes(continued.runners)
    # The normalized runs' statistics kept growing from the restored count.
    counts = rn.count_as_int(ppo.norm_state(resumed).stats)
    np.testing.assert_array_equal(counts, [2 * 16384, 2 * 16384, 0, 0])


def test_eval_only_restores_and_leaves_checkpoint_untouched(trained):
    directory, _, train_output = trained
    path = os.path.join(directory, ppo.CHECKPOINT_FILE)
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
    runners = reference.runners
    returns, states = ppo.evaluate(SMALL, runners)
    assert returns.shape == (4, SMALL.num_eval_envs)
    assert np.all(np.asarray(returns) >= 1.0)
    trained_stats = ppo.norm_state(runners).stats
    assert serialization.to_bytes(states.stats) == serialization.to_bytes(trained_stats)
    # Evaluation did step fresh environments through the normalizer: their own
    # discounted returns accumulated while the statistics stayed frozen.
    assert states.ret.shape == (4, SMALL.num_eval_envs)
    assert np.all(np.asarray(states.ret) > 0.0)
    # Seed i of each arm evaluates on the same episodes: one arm alone gives
    # the same returns as in the comparison.
    raw_only = jax.tree.map(lambda leaf: leaf[2:], runners)
    np.testing.assert_array_equal(ppo.evaluate(SMALL, raw_only)[0], returns[2:])


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


def test_init_runners_rejects_bad_arms():
    with pytest.raises(ValueError, match="normalize should be a bool or a non-empty sequence"):
        ppo.init_runners(SMALL, 0, 1, normalize=())
    with pytest.raises(ValueError, match="got 'yes'"):
        ppo.init_runners(SMALL, 0, 1, normalize="yes")  # type: ignore[arg-type]  # deliberately invalid


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
    (corrupt / ppo.CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    no_config = tmp_path / "no_config"  # a checkpoint without its config.json
    no_config.mkdir()
    shutil.copy(os.path.join(trained[0], ppo.CHECKPOINT_FILE), no_config)
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
        timeout=120,
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
        [path, "--total-steps", "0"], capture_output=True, text=True, timeout=120
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
    init = ppo._jitted_init(SMALL)
    jaxpr = jax.make_jaxpr(init)(jax.random.PRNGKey(0), True).jaxpr
    shapes = [
        var.aval.shape for eq in _equations(jaxpr) if eq.primitive.name == "qr" for var in eq.invars
    ]
    assert shapes
    assert all(len(shape) == 2 for shape in shapes)
    runners = ppo.init_runners(SMALL, seed=0, num_seeds=3, normalize=ARMS)
    assert jax.tree.structure(runners) == jax.tree.structure(ppo._runner_shapes(SMALL, 6))  # type: ignore[operator, unused-ignore]  # jax's PyTreeDef is opaque to mypy
    assert all(leaf.shape[0] == 6 for leaf in jax.tree.leaves(runners))
    # Seed i of both arms starts from the same networks and environments.
    np.testing.assert_array_equal(ppo.normalizes(runners), [True] * 3 + [False] * 3)
    first, second = jax.tree.leaves(runners.params)[0][:3], jax.tree.leaves(runners.params)[0][3:]
    np.testing.assert_array_equal(first, second)
