"""Loss aggregation against verl's, TRL's and Tunix's code, across devices and micro-batches.

``tests/aggregation_reference.py`` transcribes the trainers' code in float64
NumPy. Inputs are float32 values; the references evaluate those same values
in float64. Every mode of every convention runs in one compiled program (the
values, and their gradients in the losses), shared by the tests.
"""

import contextlib
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rewardnorm_jax as rn
from rewardnorm_jax._src.llm.aggregation import AGGREGATIONS
from tests import aggregation_reference as reference

MODES = [(c, m) for c, rules in AGGREGATIONS.items() for m in rules.modes]
COUNTED = [(c, m) for c, m in MODES if AGGREGATIONS[c].modes[m].count != "one"]
LENGTHY = [(c, m) for c, m in MODES if AGGREGATIONS[c].modes[m].length]
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}
ROWS, TOKENS = 8, 24


def x64(dtype):
    """float64 for ``"float64"``; float32 in the default configuration (its compiled programs)."""
    return jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()


def batch(seed=0, weighted=False):
    """Float32 losses, ragged responses with one empty, NaN and inf where masked out."""
    rng = np.random.default_rng(seed)
    losses = (rng.standard_normal((ROWS, TOKENS)) * 3 + 1).astype(np.float32)
    mask = np.arange(TOKENS) < rng.integers(1, TOKENS + 1, (ROWS, 1))
    mask[3] = False  # an empty response
    mask[0, 5:9] = False  # a hole inside one (a tool call's tokens)
    if weighted:
        mask = (mask * rng.random((ROWS, TOKENS)) * 2).astype(np.float32)
    clean = np.where(mask != 0, losses, 0).astype(np.float32)
    losses[mask == 0] = rng.choice([np.nan, np.inf, -1e30], int((mask == 0).sum()))
    return losses, mask, clean


def every_mode(losses, mask, length=None, count=None, axis_name=None):
    """Every convention's every mode, stacked; ``luspo`` on the first column, per sequence."""
    values = []
    for convention, mode in MODES:
        x = losses[:, :1] if mode == "luspo" else losses
        named = {"length": length} if (convention, mode) in LENGTHY else {}
        if count is not None and (convention, mode) in COUNTED:
            named["count"] = count[COUNTED.index((convention, mode))]
        values.append(
            rn.aggregate_loss(x, mask, mode, convention=convention, axis_name=axis_name, **named)
        )
    return jnp.stack(values)


def every_count(mask, axis_name=None):
    return jnp.stack(
        [rn.aggregation_count(mask, m, convention=c, axis_name=axis_name) for c, m in COUNTED]
    )


def program(losses, mask, length=float(TOKENS), count=None):
    """Every mode's loss, and its gradient in the losses: compiled once per dtype and shape.

    ``length`` is passed on traced, so that every value of it shares the compiled program.
    """
    return _program(losses, mask, length, count)


@jax.jit
def _program(losses, mask, length, count):
    value = functools.partial(every_mode, length=length, count=count)
    return value(losses, mask), jax.jacrev(value)(losses, mask)


@functools.cache
def gradients(weighted, length):
    """The trainers' weighting of every token, by mode, for ``batch(weighted=weighted)``."""
    _, mask, clean = batch(weighted=weighted)
    return [reference.reference_gradient(c, m, clean, mask, length) for c, m in MODES]


def references(losses, mask, length=None):
    want = np.array([reference.reference(c, m, losses, mask, length) for c, m in MODES])
    scale = np.array([reference.reference(c, m, np.abs(losses), mask, length) for c, m in MODES])
    return want, scale


def assert_within(got, want, scale, tolerance):
    """``|got - want| <= tolerance * scale`` (scale: the aggregation of |w x|); NaN where NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    error = np.abs(got[finite] - want[finite])
    bound = tolerance * np.abs(scale[finite])
    assert np.all(error <= bound), [
        (MODES[i], e, b)
        for i, e, b in zip(np.flatnonzero(finite), error, bound, strict=True)
        if e > b
    ]


@pytest.mark.parametrize("weighted", [False, True], ids=["flags", "weights"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_mode_equals_its_trainer_and_its_gradient_is_the_trainers_weighting(dtype, weighted):
    losses, mask, clean = batch(weighted=weighted)
    with x64(dtype):
        for length in (TOKENS, TOKENS + 8):  # L: the mask's last dimension, or a longer limit
            got, gradient = program(losses.astype(dtype), mask.astype(dtype), float(length))
            assert got.dtype == dtype
            want, scale = references(clean, mask, length)
            assert_within(got, want, scale, TOLERANCE[dtype])
            for index, (convention, mode) in enumerate(MODES):
                weights = gradients(weighted, length)[index]
                ours = np.asarray(gradient[index], np.float64)
                if mode == "luspo":  # per-sequence losses: the first column
                    assert not ours[:, 1:].any()
                    ours = ours[:, :1]
                np.testing.assert_allclose(
                    ours, weights, rtol=TOLERANCE[dtype], atol=0, err_msg=f"{convention} {mode}"
                )


def test_each_convention_reads_the_trainers_options_as_its_own():
    losses, mask, clean = batch(seed=1)
    n, s, b = mask.sum(), (mask.sum(-1) > 0).sum(), mask.shape[0]
    cases = [  # the trainer's call, the library's
        (
            reference.verl_agg_loss(clean, mask, "token-mean", batch_num_tokens=2 * n),
            rn.aggregate_loss(losses, mask, "token-mean", convention="verl", count=2 * n),
        ),
        (
            reference.verl_agg_loss(clean, mask, "seq-mean-token-mean", global_batch_size=b),
            rn.aggregate_loss(losses, mask, "seq-mean-token-mean", convention="verl", count=b),
        ),
        (
            reference.verl_agg_loss(clean, mask, "seq-mean-token-sum-norm", loss_scale_factor=64),
            rn.aggregate_loss(
                losses, mask, "seq-mean-token-sum-norm", convention="verl", length=64
            ),
        ),
        (
            reference.trl_loss(clean, mask, "dapo", num_items_in_batch=3 * n),
            rn.aggregate_loss(losses, mask, "dapo", convention="trl", count=3 * n),
        ),
        (
            reference.trl_loss(clean, mask, "dr_grpo", max_completion_length=100),
            rn.aggregate_loss(losses, mask, "dr_grpo", convention="trl", length=100),
        ),
        (
            reference.tunix_aggregate_loss(clean, mask, "sequence-mean-token-sum-norm", norm=0.5),
            rn.aggregate_loss(
                losses, mask, "sequence-mean-token-sum-norm", convention="tunix", count=0.5
            ),
        ),
        (
            reference.tunix_aggregate_loss(clean, mask, "sequence-mean-token-scale", norm=30),
            rn.aggregate_loss(
                losses, mask, "sequence-mean-token-scale", convention="tunix", length=30
            ),
        ),
        # L defaults to the mask's last dimension, as verl's loss_scale_factor and Tunix's norm.
        (
            reference.verl_agg_loss(clean, mask, "seq-mean-token-sum-norm"),
            rn.aggregate_loss(losses, mask, "seq-mean-token-sum-norm", convention="verl"),
        ),
        (
            reference.tunix_aggregate_loss(clean, mask, "sequence-mean-token-scale"),
            rn.aggregate_loss(losses, mask, "sequence-mean-token-scale", convention="tunix"),
        ),
        # Tunix 0.1.7's sequence-mean-token-sum-norm divides by the non-empty rows.
        (
            reference.tunix_017_aggregate_loss(clean, mask, "sequence-mean-token-sum-norm"),
            rn.aggregate_loss(losses, mask, "seq-mean-token-sum", convention="tunix"),
        ),
    ]
    assert s < b  # the batch has an empty response: S and B differ
    for want, got in cases:
        np.testing.assert_allclose(float(got), want, rtol=1e-6)


def test_an_empty_response_counts_in_the_rows_not_in_the_sequences():
    losses, mask, _ = batch(seed=2)
    kept = mask.sum(-1) > 0
    assert not kept.all()
    for convention, mode in MODES:
        x = losses[:, :1] if mode == "luspo" else losses
        whole = rn.aggregate_loss(x, mask, mode, convention=convention)
        alone = rn.aggregate_loss(x[kept], mask[kept], mode, convention=convention)
        # Rows, but not sequences, count an empty response: it dilutes their mean.
        rows = AGGREGATIONS[convention].modes[mode].count == "rows"
        factor = kept.sum() / kept.size if rows else 1.0
        np.testing.assert_allclose(whole, alone * factor, rtol=2e-6, err_msg=f"{convention} {mode}")


def test_a_sequence_mean_takes_weights_of_any_total():
    losses = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    for convention, mode in (("exact", "seq-mean-token-mean"), ("trl", "grpo")):
        ones = rn.aggregate_loss(losses, mask, mode, convention=convention)
        huge = rn.aggregate_loss(losses, mask * 3e38, mode, convention=convention)
        np.testing.assert_allclose(huge, ones, rtol=1e-6)  # (2 + 4.5) / 2, rows past the max
        np.testing.assert_allclose(ones, 3.25, rtol=1e-6)


def test_no_tokens_gives_each_trainers_number():
    losses, _, _ = batch(seed=3)
    mask = np.zeros((ROWS, TOKENS), np.float32)
    got, gradient = program(losses, mask)
    want, _ = references(np.zeros_like(losses), mask)
    np.testing.assert_array_equal(got, want)  # NaN where the trainer divides 0 by 0
    for index, (convention, mode) in enumerate(MODES):
        nan = convention == "verl" and mode != "token-sum"  # verl's 0 / 0
        assert np.isnan(got[index]) if nan else got[index] == 0, (convention, mode)
        # No token is weighted: nothing to learn from (verl's masked_sum gives 0 too).
        assert not np.asarray(gradient[index]).any(), (convention, mode)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_micro_batches_with_the_accumulated_count_sum_to_the_whole_batch(dtype):
    losses, mask, _ = batch(seed=4, weighted=True)
    parts = 4
    with x64(dtype):
        losses, mask = losses.astype(dtype), mask.astype(dtype)
        whole, whole_gradient = program(losses, mask)
        micro = list(zip(np.split(losses, parts), np.split(mask, parts), strict=True))
        count = sum(jax.jit(every_count)(m) for _, m in micro)  # first, over every micro-batch
        runs = [program(x, m, count=count) for x, m in micro]
        total = sum(value for value, _ in runs)
        gradient = np.concatenate([g for _, g in runs], axis=1)
    scale = np.asarray(program(np.abs(np.nan_to_num(losses, posinf=0, neginf=0)), mask)[0])
    assert_within(total, whole, scale, TOLERANCE[dtype])
    np.testing.assert_allclose(gradient, whole_gradient, rtol=TOLERANCE[dtype], atol=0)


def test_trl_over_processes_and_accumulation_steps_equals_the_whole_batch():
    # Two processes, two accumulation steps each: TRL's loss on every micro-batch, the
    # processes' gradients averaged (DDP) and the steps' summed, against one whole batch.
    losses, mask, clean = batch(seed=5)
    processes, steps, length = 2, 2, 40
    tokens = mask.sum()
    pieces = [
        (clean[k::4], mask[k::4]) for k in range(processes * steps)
    ]  # micro-batch k of step k // 2 on process k % 2

    def trl(loss_type, **options):
        """The steps' sum of the processes' mean of TRL's micro-batch losses."""
        cut = (lambda x: x[:, :1]) if loss_type == "luspo" else (lambda x: x)  # per sequence
        return sum(
            np.mean(
                [reference.trl_loss(cut(x), m, loss_type, **options) for x, m in pieces[s::steps]]
            )
            for s in range(steps)
        )

    ga = {"gradient_accumulation_steps": steps}
    cases = {
        "dapo": trl("dapo", num_items_in_batch=tokens, num_processes=processes),
        "grpo": trl("grpo", **ga),
        "dr_grpo": trl("dr_grpo", max_completion_length=length, **ga),
        "luspo": trl("luspo", **ga),
    }
    for loss_type, want in cases.items():
        x = losses[:, :1] if loss_type == "luspo" else losses
        named = {"length": length} if loss_type == "dr_grpo" else {}
        got = rn.aggregate_loss(x, mask, loss_type, convention="trl", **named)
        np.testing.assert_allclose(float(got), want, rtol=1e-6, err_msg=loss_type)
    # bnpo divides each micro-batch by its own tokens: the mean of the micro-batches' losses.
    micro_mean = np.mean([rn.aggregate_loss(x, m, "bnpo", convention="trl") for x, m in pieces])
    np.testing.assert_allclose(micro_mean, trl("bnpo", **ga), rtol=1e-6)


def test_verl_data_parallel_ranks_equal_the_whole_batch():
    # verl's agg_loss on each rank with the global counts and dp_size; FSDP averages the ranks.
    losses, mask, clean = batch(seed=6, weighted=True)
    ranks = 4
    n, s = mask.sum(), (mask.sum(-1) > 0).sum()
    for mode in AGGREGATIONS["verl"].modes:
        want = np.mean(
            [
                reference.verl_agg_loss(
                    x, m, mode, dp_size=ranks, batch_num_tokens=n, global_batch_size=s
                )
                for x, m in zip(np.split(clean, ranks), np.split(mask, ranks), strict=True)
            ]
        )
        got = rn.aggregate_loss(losses, mask, mode, convention="verl")
        np.testing.assert_allclose(float(got), want, rtol=1e-6, err_msg=mode)


def test_shares_under_a_vmapped_axis_sum_to_the_whole_batch():
    losses, mask, _ = batch(seed=7)
    mask = mask.astype(np.float32)  # the compiled program of the tests above
    whole, whole_gradient = program(losses, mask)
    shards = (losses.reshape(4, 2, TOKENS), mask.reshape(4, 2, TOKENS))
    value = functools.partial(every_mode, axis_name="device")
    shares, gradient = jax.jit(
        jax.vmap(lambda x, m: (value(x, m), jax.jacrev(value)(x, m)), axis_name="device")
    )(*shards)
    scale = np.asarray(program(np.abs(np.nan_to_num(losses, posinf=0, neginf=0)), mask)[0])
    assert_within(shares.sum(0), whole, scale, TOLERANCE["float32"])
    # Each shard's gradient for its own tokens is the one-device gradient.
    gradient = np.moveaxis(np.asarray(gradient), 0, 1).reshape(whole_gradient.shape)
    np.testing.assert_allclose(gradient, whole_gradient, rtol=1e-6, atol=0)


def test_traced_options_out_of_range_give_nan():
    losses, mask, _ = batch(seed=8)

    @jax.jit
    def run(length, count, weights):
        return (
            rn.aggregate_loss(losses, mask, "dr_grpo", convention="trl", length=length),
            rn.aggregate_loss(losses, mask, "token-mean", count=count),
            rn.aggregate_loss(losses, weights, "token-mean"),
        )

    good = run(float(TOKENS), 100.0, mask.astype(np.float32))
    assert np.isfinite(good).all()
    for length, count, weight in ((TOKENS - 1.0, -1.0, -1.0), (np.inf, np.nan, np.nan)):
        weights = mask.astype(np.float32)
        weights[0, 0] = weight
        assert np.isnan(run(length, count, weights)).all()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            {"mode": "mean"},
            ValueError,
            (
                "mode should be one of 'token-mean', 'token-sum', 'seq-mean-token-sum', "
                "'seq-mean-token-mean', 'seq-mean-token-sum-norm' under convention='exact', "
                "got mode='mean'"
            ),
        ),
        (
            {"mode": "token-mean", "convention": "trl"},
            ValueError,
            (
                "mode should be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo', 'luspo' under "
                "convention='trl'"
            ),
        ),
        ({"convention": "openrlhf"}, ValueError, "convention should be one of 'exact', 'verl'"),
        (
            {"mode": "dr_grpo", "convention": "trl", "length": TOKENS - 1},
            ValueError,
            "length should be a finite number >= the mask's last dimension 24",
        ),
        ({"mode": "seq-mean-token-sum-norm", "length": np.nan}, ValueError, "got length=nan"),
        (
            {"length": 30},
            ValueError,
            "mode='token-mean' under convention='exact' divides by no length",
        ),
        ({"mode": "token-sum", "count": 3}, ValueError, "this mode divides by no count"),
        ({"count": -1.0}, ValueError, "count should be a finite number >= 0"),
        ({"count": np.ones(2)}, ValueError, "count should be a finite number >= 0"),
        ({"mask": -np.ones((ROWS, TOKENS))}, ValueError, "mask holds -1.0; expected bools"),
        ({"mask": np.full((ROWS, TOKENS), np.nan)}, ValueError, "mask holds nan"),
        ({"mask": np.ones(TOKENS, bool)}, ValueError, "mask has shape (24,); expected (B, T)"),
        ({"losses": np.ones(ROWS)}, ValueError, "losses has shape (8,), which does not broadcast"),
        ({"losses": np.ones((ROWS, 1), complex)}, TypeError, "losses should hold real numbers"),
        ({"axis_name": "device"}, ValueError, "axis_name='device': no map binds the axis"),
    ],
)
def test_options_and_inputs_are_checked_by_name(call, error, message):
    arguments = {
        "losses": np.ones((ROWS, TOKENS)),
        "mask": np.ones((ROWS, TOKENS), bool),
        "mode": "token-mean",
        **call,
    }
    with pytest.raises(error, match=re.escape(message)):
        rn.aggregate_loss(
            arguments.pop("losses"), arguments.pop("mask"), arguments.pop("mode"), **arguments
        )


def test_luspo_refuses_per_token_losses_which_trl_averages_over_every_position():
    losses = np.arange(6.0).reshape(2, 3)
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    # TRL's luspo with per-token losses: (1 / (B T)) sum_bt n_b x_bt, every position, not a
    # (1 / B) sum_b n_b x_b.
    assert reference.trl_loss(losses, mask, "luspo") == pytest.approx((2 * 3 + 1 * 12) / 6)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "losses has shape (2, 3); mode='luspo' takes one loss per sequence, shape (2, 1)"
        ),
    ):
        rn.aggregate_loss(losses, mask, "luspo", convention="trl")
    per_sequence = rn.aggregate_loss(losses[:, :1], mask, "luspo", convention="trl")
    np.testing.assert_allclose(per_sequence, reference.trl_loss(losses[:, :1], mask, "luspo"))


def test_a_count_of_a_mode_without_one_is_refused():
    with pytest.raises(
        ValueError, match="mode='token-sum' under convention='verl' divides by no count"
    ):
        rn.aggregation_count(np.ones((2, 3), bool), "token-sum", convention="verl")
