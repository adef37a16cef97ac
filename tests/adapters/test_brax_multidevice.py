"""Brax's PPO on 2 devices keeps one set of statistics, merged across its pmap axis.

Brax's trainers ``pmap`` over the axis ``"i"``; a transform built with
``axis_name="i"`` and passed to ``wrap_env_fn`` merges each step's returns
across the devices. The run happens in a fresh interpreter with 2 virtual CPU
devices (``tests/_brax_multidevice_worker.py``), which records every step each
device takes and compares with the core fed the same stream on one device.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._extras import missing_reason
from tests._multidevice_worker import worker_environment
from tests.hang import HANG_TIMEOUT_S

ROOT = Path(__file__).parents[2]
FLOAT32_TOLERANCE = 1e-6  # as tests/stats/test_multidevice.py: float32 sums in another order

pytestmark = pytest.mark.skipif(
    missing_reason(["brax"]) is not None, reason=str(missing_reason(["brax"]))
)


@pytest.fixture(scope="module")
def run():
    proc = subprocess.run(
        [sys.executable, "-m", "tests._brax_multidevice_worker"],
        cwd=ROOT,
        env=worker_environment(2),
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"worker failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_brax_ppo_on_two_devices_merges_statistics_as_one_device(run):
    assert run["device_count"] == run["devices_recorded"] == 2
    assert run["shape"] == [200, 8]  # 200 steps of 8 environments, 4 per device
    assert run["terminations"] > 0  # the pendulum falls
    assert run["truncations"] > 0  # and reaches the 25-step limit
    # One set: each device counted every environment step of both devices,
    # the steps Brax counted, and ended with bit-identical statistics.
    assert run["counts"] == [run["reference_count"]] * 2 == [200 * 8] * 2
    assert run["brax_steps"] == 200 * 8
    assert run["identical"], run
    # The same statistics, returns and normalized rewards as one device fed the same stream.
    assert run["returns"] == 0.0, run
    assert run["stats"] <= FLOAT32_TOLERANCE, run
    assert run["rewards"] <= FLOAT32_TOLERANCE, run
