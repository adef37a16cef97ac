"""The PPO demo: command line, progress, learning, evaluation and checkpoints.

One short CartPole run (2 seeds x 16384 steps) is trained through the command
line once per module; the library-level tests reuse its compiled functions
(same configuration), so the module compiles the training and evaluation
functions once each.
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

import rewardnorm_jax as rn
from rewardnorm_jax import demo
from rewardnorm_jax.examples import ppo

SMALL_ARGS = ["--total-steps", "16384", "--seeds", "2"]
SMALL = ppo.PPOConfig(total_steps=16384)  # what SMALL_ARGS resolve to: 32 updates of 512 steps


def run_main(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = demo.main(argv)
    return status, out.getvalue()


def eval_line(output):
    return next(line for line in output.splitlines() if line.startswith("evaluation"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(checkpoint_dir, output)`` of ``demo --total-steps 16384 --seeds 2 --checkpoint DIR``."""
    directory = str(tmp_path_factory.mktemp("ckpt"))
    status, output = run_main([*SMALL_ARGS, "--checkpoint", directory])
    assert status == 0
    return directory, output


@pytest.fixture(scope="module")
def reference(trained):
    """The same run through the library API, in memory."""
    return ppo.train(SMALL, ppo.init_runners(SMALL, seed=0, num_seeds=2))


def test_cli_prints_progress_and_summary_and_learns(trained):
    _, output = trained
    progress = [line for line in output.splitlines() if line.startswith("update ")]
    # ceil(32 / log_lines=10) = 4: a line every 4 updates, the last at 32/32.
    assert len(progress) == 8
    assert progress[-1].startswith("update    32/32 | steps     16,384")
    assert all("steps/s" in line and "episode return" in line for line in progress)
    assert "final training episode return" in output
    assert "normalization statistics unchanged by evaluation: yes" in output
    assert "saved checkpoint" in output
    assert "total wall time" in output
    returns = [float(re.search(r"episode return\s+([\d.]+)", line).group(1)) for line in progress]
    # The sampled policy starts near random (episodes of about 20 steps) and
    # balances far longer after 16,384 steps (this run measured 34 -> 194).
    assert returns[0] < 40.0
    assert returns[-1] > 100.0


def test_checkpoint_holds_the_run_bit_exactly(trained, reference):
    directory, _ = trained
    config, runners = ppo.load_checkpoint(directory)
    assert config == SMALL
    # The checkpointed state is exactly the in-memory state of the same run
    # (parameters, optimizer, environments, normalizer statistics and returns, keys).
    assert serialization.to_bytes(runners) == serialization.to_bytes(reference.runners)
    stats = ppo.norm_state(runners).stats
    assert stats.count_lo.dtype == np.uint32
    assert stats.count_hi.dtype == np.uint32
    assert np.all(rn.count_as_int(stats) == 16384)  # one sample per environment step
    # Saving what was loaded rewrites the identical file.
    copy = os.path.join(directory, "resaved")
    ppo.save_checkpoint(copy, config, runners)
    with (
        open(os.path.join(directory, ppo.CHECKPOINT_FILE), "rb") as a,
        open(os.path.join(copy, ppo.CHECKPOINT_FILE), "rb") as b,
    ):
        assert a.read() == b.read()


def test_resumed_run_equals_uninterrupted_continuation(trained, reference, tmp_path):
    directory = str(tmp_path / "resume")
    shutil.copytree(trained[0], directory)
    status, output = run_main(["--checkpoint", directory])
    assert status == 0
    assert "restored checkpoint" in output
    _, resumed = ppo.load_checkpoint(directory)
    continued = ppo.train(SMALL, reference.runners)
    assert serialization.to_bytes(resumed) == serialization.to_bytes(continued.runners)
    # The statistics kept growing from the restored count.
    assert np.all(rn.count_as_int(ppo.norm_state(resumed).stats) == 2 * 16384)


def test_eval_only_restores_and_leaves_checkpoint_untouched(trained):
    directory, train_output = trained
    path = os.path.join(directory, ppo.CHECKPOINT_FILE)
    with open(path, "rb") as f:
        before = f.read()
    status, output = run_main(["--checkpoint", directory, "--eval-only"])
    assert status == 0
    assert "update " not in output  # no training
    # Same agent and statistics restored: the same evaluation, to the printed digit.
    strip_time = lambda line: re.sub(r"\([\d.]+ s\)", "", line)  # noqa: E731
    assert strip_time(eval_line(output)) == strip_time(eval_line(train_output))
    assert "normalization statistics unchanged by evaluation: yes" in output
    with open(path, "rb") as f:
        assert f.read() == before


def test_evaluation_freezes_and_keeps_statistics(reference):
    runners = reference.runners
    returns, states = ppo.evaluate(SMALL, runners)
    assert returns.shape == (2, SMALL.num_eval_envs)
    assert np.all(np.asarray(returns) >= 1.0)
    trained_stats = ppo.norm_state(runners).stats
    assert serialization.to_bytes(states.stats) == serialization.to_bytes(trained_stats)
    # Evaluation did step fresh environments through the normalizer: their own
    # discounted returns accumulated while the statistics stayed frozen.
    assert states.ret.shape == (2, SMALL.num_eval_envs)
    assert np.all(np.asarray(states.ret) > 0.0)


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
        (["--checkpoint", "{trained}", "--no-normalize"], "does not match the checkpoint"),
        (["--checkpoint", "{corrupt}"], "cannot read the checkpoint"),
        (["--checkpoint", "{a_file}"], "--checkpoint {a_file} is a file; give a directory"),
        (["--checkpoint", "{a_file}/sub"], "cannot write to {a_file}"),
    ],
)
def test_bad_input_exits_2_with_message(argv, message, trained, tmp_path, capsys):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / ppo.CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    names = {
        "empty": str(tmp_path),
        "trained": trained[0],
        "corrupt": str(corrupt),
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
    jaxpr = jax.make_jaxpr(init)(jax.random.PRNGKey(0)).jaxpr
    shapes = [
        var.aval.shape for eq in _equations(jaxpr) if eq.primitive.name == "qr" for var in eq.invars
    ]
    assert shapes
    assert all(len(shape) == 2 for shape in shapes)
    runners = ppo.init_runners(SMALL, seed=0, num_seeds=3)
    assert jax.tree.structure(runners) == jax.tree.structure(ppo._runner_shapes(SMALL, 3))
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(runners))
