"""Statistics shared across vmap axes, devices and processes: one merged set, device-count free.

The runs need several devices, so they happen in fresh interpreters started by
the ``runs`` fixture (``tests/_multidevice_worker.py``), leaving this process's
single CPU device untouched:

* two processes with 8 virtual CPU devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=8``), float32 in one and
  float64 in the other, run the same masked reward stream through ``vmap`` with
  ``axis_name``, ``pmap``, ``shard_map`` and ``jit`` over
  ``NamedSharding``-sharded inputs on 1, 2, 4 and 8 devices, plus two named
  axes at once, a per-environment ``vmap``, one update past float32's exact
  count and PopArt's per-task statistics;
* two processes with 2 CPU devices each join through
  ``jax.distributed.initialize`` on a localhost coordinator and ``shard_map``
  over all 4 devices.

All four start at once: most of the time goes to XLA compiling, one core each.
The gymnax adapter under ``shard_map`` runs in a fifth process with 8 devices,
started by its test alone (where gymnax is installed).

The stream (``make_stream``) has 21 environments padded to 24 with inactive
ones holding NaN rewards, a random 15 % of inactive entries, and 6 environments
inactive for the first 10 steps: uneven shards, some devices with nothing to
merge on some steps.
"""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import _multidevice_worker as worker
from tests.hang import HANG_TIMEOUT_S

ROOT = Path(__file__).parents[2]  # the worker runs as python -m tests._multidevice_worker
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}
pytestmark = pytest.mark.slow  # the workers compile for a minute: the file starts early
MODES = ("vmap", "pmap", "shard_map", "sharded_jit")
EXTRA_MODES = ("vmap_per_env_shared_stats", "pmap_of_vmap_tuple_axes", "shard_map_2x4_tuple_axes")
GYMNAX = "rewardnorm_jax.gymnax"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(*args: str, devices: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests._multidevice_worker", *args],
        cwd=ROOT,
        env=worker.worker_environment(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen, deadline: float) -> dict:
    """The JSON object a worker prints on its last line (gloo logs to stdout before it)."""
    try:
        stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{stdout}\n{stderr[-4000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs():
    port = str(_free_port())
    processes = [  # two similar halves of the compile work
        _start("matrix", "float32", "popart", "groups", "verl", devices=8),
        _start("matrix", "float64", "large_batch", "keyed", "whitening", "aggregation", devices=8),
    ]
    processes += [_start("distributed", port, str(i), devices=2) for i in range(2)]
    try:
        deadline = time.monotonic() + HANG_TIMEOUT_S  # for all of them together
        first, second, *distributed = [_result(p, deadline) for p in processes]
        return {"matrix": {**first, **second}, "distributed": distributed}
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _rows(matrix, mode, dtype, device_counts):
    labels = worker.configs(np.dtype(dtype))
    rows = {
        (label, parts): matrix[f"{mode}/{label}/{dtype}/{parts}"]
        for label in labels
        for parts in device_counts
    }
    assert len(rows) == len(labels) * len(device_counts)
    return rows


def _check(rows, tolerance):
    active = worker.make_stream()[3]
    for (label, parts), row in rows.items():
        where = f"{label} on {parts} device(s): {row}"
        # One merged set of statistics, bit-identical on every participant.
        assert row["identical"], where
        # Exact count: every active entry of the stream, padding and masks excluded.
        assert row["count"] == row["reference_count"] == active.sum(), where
        # Mean and variance, and every normalized reward, as on one device.
        assert row["stats"] <= tolerance, where
        assert row["rewards"] <= tolerance, where


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
def test_one_to_eight_devices_match_single_device(runs, mode, dtype):
    rows = _rows(runs["matrix"], mode, dtype, worker.DEVICE_COUNTS)
    _check(rows, TOLERANCE[dtype])
    if mode != "sharded_jit":  # jit returns one global array, not per-device copies
        for (_, parts), row in rows.items():
            assert row["participants"] == parts


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", EXTRA_MODES)
def test_tuple_axis_names_and_per_env_vmap_match_single_device(runs, mode, dtype):
    # pmap_of_vmap: axis_name=("device", "env") over 4 devices x 6 envs (24 participants);
    # shard_map_2x4: a 2 x 4 mesh, axis_name=("host", "device");
    # vmap_per_env: a per-environment step vmapped over 24 envs, statistics in and out unbatched.
    rows = _rows(runs["matrix"], mode, dtype, (8,))
    _check(rows, TOLERANCE[dtype])
    expected_participants = {"pmap_of_vmap_tuple_axes": 24, "shard_map_2x4_tuple_axes": 8}
    for row in rows.values():
        assert row["participants"] == expected_participants.get(mode, 1)


@pytest.mark.requires(GYMNAX)
def test_gymnax_adapter_shares_statistics_under_shard_map():
    # NormalizeReward(VecEnv(CartPole), semantics="purejaxrl", axis_name="device"),
    # reset and stepped in a lax.scan inside shard_map over 8 devices (2 envs each),
    # against the same wrapper without axis name over all 16 envs on one device.
    # Its own worker: the session that has gymnax need not run the others.
    proc = _start("matrix", "gymnax", devices=8)
    row = _result(proc, time.monotonic() + HANG_TIMEOUT_S)["gymnax_shard_map/purejaxrl/float32/8"]
    assert row["participants"] == 8
    assert row["identical"], row
    assert row["count"] == row["reference_count"] == 16 * 64, row
    assert row["stats"] <= TOLERANCE["float32"], row
    assert row["rewards"] <= TOLERANCE["float32"], row


def test_two_processes_end_with_identical_statistics(runs):
    first, second = runs["distributed"]
    for result in (first, second):
        assert result["process_count"] == 2, result
        assert result["device_count"] == 4, result
        assert result["local_copies"] == 2, result
        assert result["local_copies_identical"], result
    assert first["mean"] == second["mean"], (first, second)
    assert first["var"] == second["var"], (first, second)
    assert first["count"] == second["count"] == worker.make_stream()[3].sum()
    # ... and they equal the single-device statistics of the same stream.
    reference = runs["matrix"]["reference/purejaxrl/float32"]
    assert first["count"] == reference["count"]
    for key in ("mean", "var"):
        assert abs(first[key] - reference[key]) <= TOLERANCE["float32"] * abs(reference[key])


def test_update_beyond_float32_exact_count_merges_exactly(runs):
    # One update of 8 * (2**21 + 1) entries over 8 devices, one masked out: the count
    # 16777223 exceeds 2**24 and is odd, so only the uint32 count can hold it.
    row = runs["matrix"]["large_batch/float32/8"]
    assert row["identical"], row
    assert row["count"] == row["reference_count"] == row["expected_count"] == 8 * (2**21 + 1) - 1
    assert row["stats"] <= TOLERANCE["float32"], row


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("parts", [2, 8])
def test_per_task_statistics_merge_across_devices(runs, dtype, parts):
    row = runs["matrix"][f"keyed/{dtype}/{parts}"]
    assert row["identical"], row
    assert row["count"] == row["reference_count"], row
    assert np.sum(row["count"]) == 48 * 24 * 2, row  # every step, environment and objective
    assert row["stats"] <= TOLERANCE[dtype], row
    assert row["rewards"] <= TOLERANCE[dtype], row


@pytest.mark.parametrize("parts", [2, 8])
def test_popart_merges_across_devices(runs, parts):
    # rn.popart(1e-3, num_tasks=3, axis_name="device").step in a scan inside shard_map: the
    # statistics and the rescaled head are identical on every device and equal one device's.
    row = runs["matrix"][f"popart/float32/{parts}"]
    assert row["identical"], row
    assert row["count"] == row["reference_count"], row
    assert np.sum(row["count"]) == 48 * 24, row
    assert row["stats"] <= TOLERANCE["float32"], row
    assert row["layer"] <= TOLERANCE["float32"], row


@pytest.mark.parametrize(
    "case", ["batch_std", "gdpo_trl", "grpo_span", "rloo_verl_span", "grpo_local"]
)
def test_group_advantages_across_devices_equal_the_gathered_batch(runs, case):
    # shard_map on 2 devices: batch statistics over both, groups split across them
    # (groups_span_devices=True) or numbered per device (False), as one device on all answers.
    row = runs["matrix"][f"groups/{case}"]
    assert row["advantages"] <= TOLERANCE["float32"], row
    assert row["nan_match"], row
    assert row["zero_variance_match"], row


@pytest.mark.parametrize("convention", ["exact", "verl", "tunix", "openrlhf"])
@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whitening_across_devices_equals_one_device(runs, convention, shift_mean):
    # shard_map on 2 devices, NaN and inf at masked-out positions: the statistics of every
    # masked-in token of both devices, unpoisoned, as one device on the whole batch.
    row = runs["matrix"][f"whiten/{convention}/{shift_mean}"]
    assert row["finite"], row
    assert row["values"] <= TOLERANCE["float32"], row
    assert row["nan_match"], row


@pytest.mark.parametrize("case", ["gpg", "gpg_contiguous", "rloo_vectorized", "weighted_whiten"])
@pytest.mark.parametrize(("dtype", "tolerance"), [("float32", 1e-5), ("float64", 1e-10)])
def test_verl_parity_across_two_devices(runs, case, dtype, tolerance):
    # shard_map on 2 devices, ids spanning both with groups of one, a NaN reward, contiguous
    # groups with f_norm=2, a weighted token mask:
    # verl's float64 code on the whole batch, within 1e-5 (float32) or 1e-10 (float64) of |A| + 1.
    row = runs["matrix"][f"verl/{case}/{dtype}"]
    assert row["error"] <= tolerance, row
    assert row["nan_match"], row


@pytest.mark.parametrize("run", ["shard_map/2", "shard_map/8", "pmap/2"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_loss_aggregation_across_devices_equals_one_device(runs, run, dtype):
    # Every mode of every convention, a weighted batch split over the devices: the devices'
    # shares sum to the one-device loss, and each device's gradient for its own tokens is the
    # one-device gradient (no device-count factor).
    row = runs["matrix"][f"aggregation/{run}/{dtype}"]
    assert row["values"] <= TOLERANCE[dtype], row
    assert row["gradients"] <= TOLERANCE[dtype], row
    assert row["zeros_match"], row


def test_a_contiguous_group_split_across_devices_is_refused(runs):
    message = runs["matrix"]["groups/split_contiguous"]
    assert "32 answers, not a multiple of group_size=64" in message, message
    assert "this device's batch must hold whole groups" in message, message
