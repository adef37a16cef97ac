"""Smoke runs of the benchmark scripts with tiny sizes (no timing is asserted).

Each script's ``main`` runs in-process with a few environments and steps; the
checks are on the printed table: every variant was timed (positive, finite
figures) and the scripts' own agreement checks passed (ours against
Gymnasium's vector wrapper in ``stream.py``, against the inline PureJaxRL
normalizer in ``rollout.py``; those raise on a mismatch).
"""

import importlib
import importlib.util
import math

import numpy as np
import pytest


def tables(text: str) -> list[list[list[str]]]:
    """The data rows of each Markdown table in ``text``, as lists of cells."""
    found = []
    for section in text.split("### ")[1:]:
        lines = [line for line in section.splitlines() if line.startswith("|")]
        assert len(lines) >= 3, section  # header, separator, at least one row
        found.append([[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]])
    return found


def table_rows(text: str) -> list[list[str]]:
    """The data rows of the only Markdown table in ``text``."""
    (rows,) = tables(text)
    return rows


def assert_positive_numbers(cells):
    for cell in cells:
        value = float(cell.rstrip("%"))
        assert math.isfinite(value), cells
        assert value > 0, cells


def run_main(module_name, argv, capsys) -> str:
    importlib.import_module(f"benchmarks.{module_name}").main(argv)
    return capsys.readouterr().out


# The frameworks each script compares with: stream.py (and scaling.py, which reuses its
# streams) Gymnasium's vector wrapper, rollout.py a gymnax environment.
NEEDS = {
    "stream": "gymnasium",
    "rollout": "gymnax",
    "scaling": "gymnasium",
    "streams": None,
    "group_advantages": None,
    "float32_residue": None,
    "purejaxrl_wrapper": "gymnax",
    "observation": None,  # Brax's column when Brax is installed
    "categorical": None,
    "categorical_learning": None,
    "length_bias": "flax",
}


@pytest.mark.parametrize(
    "module_name",
    [
        pytest.param(name, marks=() if module is None else pytest.mark.requires(module))
        for name, module in NEEDS.items()
    ],
)
def test_help(module_name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(module_name, ["--help"], capsys)
    assert exit_info.value.code == 0
    assert "--markdown" in capsys.readouterr().out


@pytest.mark.requires(NEEDS["stream"])
def test_stream(capsys):
    out = run_main(
        "stream", ["--sizes", "8", "64", "--steps", "50", "--repeats", "2", "--markdown"], capsys
    )
    assert "Machine:" in out
    assert "gymnasium" in out
    times, kernels = tables(out)
    assert [row[0] for row in times] == ["8", "64"]
    for row in times:
        assert_positive_numbers(row[1:16])
        assert float(row[16]) < 1e-3  # ours against Gymnasium's vector wrapper
    assert [row[0] for row in kernels] == ["8", "64"]
    for row in kernels:
        assert all(int(cell) >= 1 for cell in row[1:]), row


@pytest.mark.requires(NEEDS["rollout"])
def test_rollout(capsys):
    out = run_main(
        "rollout",
        [
            "--env-names",
            "Pendulum-v1",
            "--envs",
            "8",
            "--steps",
            "20",
            "--repeats",
            "2",
            "--markdown",
        ],
        capsys,
    )
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["Pendulum-v1"]
    for row in rows:
        assert_positive_numbers(row[1:4] + row[8:9])
        assert float(row[9]) < 1e-2  # ours against the inline normalizer


@pytest.mark.requires(NEEDS["scaling"])
def test_scaling(capsys):
    out = run_main(
        "scaling", ["--sizes", "1", "8", "--steps", "20", "--repeats", "2", "--markdown"], capsys
    )
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["1", "8"]
    for row in rows:
        assert_positive_numbers(row[1:3] + row[4:8] + row[9:])
        kernels = [int(k) for k in row[8].split("/")]
        assert all(k > 0 for k in kernels), row


@pytest.mark.requires(NEEDS["scaling"])
def test_scaling_profile(capsys):
    out = run_main("scaling", ["--sizes", "8", "--steps", "20", "--profile"], capsys)
    lines = out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["N=8 default", "N=8 active", "N=8 naive"]
    for line in lines:
        total, kernels = line.split(": ", 1)[1].split(" ns/step in kernels: ")
        assert float(total) > 0, line
        times = [float(kernel.rsplit(" ", 1)[1]) for kernel in kernels.split(", ")]
        assert times == sorted(times, reverse=True), line
        assert sum(times) <= float(total) + len(times), line  # the top kernels, rounded


def test_streams(capsys):
    out = run_main(
        "streams", ["--sizes", "64", "--steps", "20", "--repeats", "2", "--markdown"], capsys
    )
    rows = table_rows(out)
    assert [row[1] for row in rows] == [
        "shared",
        "tasks 16",
        "tasks 256",
        "(N, 3) shared",
        "(N, 3) each",
        "dict of 3 each",
        "intrinsic",
    ]
    for row in rows:
        assert_positive_numbers(row[2:])


def test_group_advantages(capsys):
    out = run_main(
        "group_advantages", ["--shapes", "16x4", "4x16", "--repeats", "2", "--markdown"], capsys
    )
    rows = table_rows(out)
    variants = ["plain", "grpo exact", "grpo tunix", "plain ragged", "grpo ragged"]
    assert [(row[0], row[1]) for row in rows] == [
        (shape, name) for shape in ("16x4", "4x16") for name in variants
    ]
    for row in rows:
        assert_positive_numbers(row[2:5])
        assert float(row[5]) <= 1e-4  # the largest deviation from the plain formula


def test_float32_residue(capsys):
    rows = table_rows(run_main("float32_residue", ["--markdown"], capsys))
    assert [row[0] for row in rows] == [
        "grpo, trl",
        "grpo, verl",
        "grpo, openrlhf",
        "masked whitening, verl / tunix",
        *["k3, relative error"] * 3,
    ]
    for row in rows[:4]:
        assert float(row[2]) > 0.01  # the trainer's formula leaves a residue
    for row in rows[:3]:
        assert float(row[3]) == 0.0  # the library gives exactly 0
    assert float(rows[3][3]) < 1e-12  # the count epsilon's offset, to float rounding
    for row in rows[4:]:
        assert float(row[3]) < 1e-6  # k3 within float32 rounding
    assert float(rows[-1][2]) > 0.5  # the float32 exp(d) - d - 1 at d = 1e-4


@pytest.mark.requires("gymnax")
def test_purejaxrl_wrapper(capsys):
    argv = ["--envs", "8", "--steps", "40", "--repeats", "2", "--markdown"]
    (row,) = table_rows(run_main("purejaxrl_wrapper", argv, capsys))
    assert row[0] == "Pendulum-v1"
    assert float(row[1]) < 1e-5  # the same recurrence
    assert_positive_numbers(row[2:5])
    assert row[5] == "0 of 232"  # no NaN after the NaN reward: 29 steps x 8 environments
    assert row[6] == "232 of 232"  # every output NaN in the copy
    assert row[7] == "320"  # evaluation starts from the learned count, 40 x 8
    assert float(row[8]) == 1e-4  # the copy's reset starts from its prior


def test_observation(capsys):
    argv = ["--sizes", "8", "--dims", "3", "40", "--steps", "20", "--repeats", "2", "--markdown"]
    rows = table_rows(run_main("observation", argv, capsys))
    assert [row[:2] for row in rows] == [["3", "8"], ["40", "8"]]  # 40: the wide sums
    for row in rows:
        assert_positive_numbers(row[2:6])
        ours_error, purejaxrl_error = (float(cell) for cell in row[12].split(" / "))
        assert ours_error < 1e-4  # ours within float32 rounding of PureJaxRL's float64 arithmetic
        assert purejaxrl_error < 1e-2
        ours_brax_error, finite_error = (float(cell) for cell in row[13].split(" / ")[:2])
        if importlib.util.find_spec("brax") is None:  # no Brax: no reference to measure against
            assert math.isnan(ours_brax_error)
            assert math.isnan(finite_error)
        else:
            assert ours_brax_error < 1e-4
            assert finite_error < 1e-4


def test_categorical(capsys):
    rows = table_rows(
        run_main(
            "categorical",
            ["--batch", "64", "--atoms", "11", "--repeats", "2", "--markdown"],
            capsys,
        )
    )
    operations = ["encode"] * 4 + ["decode"] * 2 + ["loss"] * 2 + ["projection"] * 3
    assert [row[1] for row in rows] == operations
    for row in rows:
        assert_positive_numbers(row[3:5])
        if row[2] not in ("library hl_gauss", "rlax transform_to_2hot"):
            assert float(row[5]) <= 1e-5, row  # every other form agrees with the library's


def test_categorical_learning(capsys):
    out = run_main(
        "categorical_learning", ["--seeds", "2", "--updates", "30", "--markdown"], capsys
    )
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["fixed [-10, 10]", "scale-aware", "hand-typed [-150, 150]"]
    for row in rows:
        mean, spread = row[1].split(" ± ")
        assert_positive_numbers([mean])
        assert float(spread) >= 0


@pytest.mark.requires(NEEDS["length_bias"])
def test_length_bias(capsys):
    module = importlib.import_module("benchmarks.length_bias")
    argv = ["--seeds", "2", "--updates", "4", "--prompts", "2", "--markdown"]
    results = module.main(argv)
    rows = table_rows(capsys.readouterr().out)
    assert [(row[0].split()[0], row[1]) for row in rows] == [
        (mode, window) for mode in module.MODES for window in ("1-1", "2-2", "4-4")
    ]
    for row in rows:
        success, spread = (float(x) for x in row[2].split(" ± "))
        assert 0 <= success <= 1, row
        assert spread >= 0, row
        for cell in row[3:5]:  # a mean length, or "none" (no such response in the window)
            assert cell == "none" or 1 <= float(cell.split(" ± ")[0]) <= 16, row
    first = None
    for mode, curves in results.items():
        assert all(curve.shape == (2, 4) for curve in curves), mode
        np.testing.assert_array_equal(curves.correct + curves.incorrect, 2 * module.GROUP_SIZE)
        # a length is 1 to L tokens: the sums of lengths are within the counts' bounds
        for count, lengths in (
            (curves.correct, curves.correct_length),
            (curves.incorrect, curves.incorrect_length),
        ):
            assert (count <= lengths).all(), mode
            assert (lengths <= 16 * count).all(), mode
        # seed i draws the same first batch from the same parameters in every mode
        start = [curve[:, 0] for curve in curves]
        first = start if first is None else first
        np.testing.assert_array_equal(start, first, err_msg=mode)
    # the program (compiled once for every mode) runs again to the same bits
    args = module.parse_args(argv)
    config = module.Config(args.digits, args.max_target, args.max_length, 2, 4)
    again, _ = module.run(config, "token-mean", 2, 0)
    for curve, expected in zip(again, results["token-mean"], strict=True):
        np.testing.assert_array_equal(curve, expected)
