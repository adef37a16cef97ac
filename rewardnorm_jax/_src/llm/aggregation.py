r"""Loss aggregation: a batch's per-token losses as one number, in each trainer's convention.

With :math:`x_{bt}` the per-token losses, :math:`w_{bt} \ge 0` the mask (0/1
flags, or weights), :math:`n_b = \sum_t w_{bt}` the token weight of sequence
:math:`b`, :math:`N = \sum_b n_b`, :math:`S` the number of sequences with
:math:`n_b > 0`, :math:`B` the number of rows and :math:`L` a length (the
response length the batch is padded to, by default the mask's last dimension),
every mode of every trainer is one weighting

.. math::

    \ell = \frac{1}{D} \sum_b \frac{1}{r_b} \sum_t w_{bt}\, x_{bt},
    \qquad r_b \in \{1,\ n_b\}, \qquad
    D \in \{1,\ N,\ S,\ B\} \times \{1,\ L\},

one :class:`Divisor` each: the gradient with respect to :math:`x_{bt}` is
:math:`w_{bt} / (r_b D)`. The trainers differ in the guards of :math:`r_b` and
:math:`D` (an epsilon, a floor) and in what an empty batch gives, one
:class:`AggregationConvention` each. The counts :math:`N, S, B` are the whole
batch's, over every device of an ``axis_name``, or a ``count`` accumulated
beforehand over gradient-accumulation micro-batches.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.llm.whiten import broadcast_to_mask
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats.summation import power_of_two

COUNTS = ("one", "tokens", "sequences", "rows")
"""What :math:`D` counts: nothing (1), :math:`N`, :math:`S` (non-empty sequences) or :math:`B`."""


@dataclasses.dataclass(frozen=True)
class Divisor:
    r"""One mode: :math:`\ell = \frac{1}{D} \sum_b \frac{1}{r_b} \sum_t w_{bt} x_{bt}`.

    Attributes:
      count: what :math:`D` counts, one of :data:`COUNTS`.
      per_sequence: whether each sequence's sum is divided by its token
        weight, :math:`r_b = n_b` (else 1).
      length: whether :math:`D` is multiplied by the length :math:`L`.
      count_floor: :math:`D` is :math:`\max(\text{count}, \text{floor})`
        before the length (0: no floor).
      sequence_losses: whether the mode takes one loss per sequence,
        ``(B, 1)``, and refuses per-token losses.
    """

    count: str
    per_sequence: bool = False
    length: bool = False
    count_floor: float = 0.0
    sequence_losses: bool = False


@dataclasses.dataclass(frozen=True)
class AggregationConvention:
    r"""One trainer's modes and arithmetic.

    Attributes:
      name: the convention's name.
      modes: the trainer's mode names, each to its :class:`Divisor`.
      sequence_epsilon: added to :math:`n_b` where it divides (verl's 1e-8).
      sequence_floor: :math:`r_b = \max(n_b, \text{floor})` (TRL, Tunix: 1).
      empty: what a divisor :math:`D = 0` gives: ``"zero"`` (the loss 0, its
        gradient 0) or ``"nan"`` (verl's 0 / 0).
    """

    name: str
    modes: dict[str, Divisor]
    sequence_epsilon: float = 0.0
    sequence_floor: float = 0.0
    empty: str = "zero"


_VERL_MODES = {
    "token-mean": Divisor("tokens"),
    "token-sum": Divisor("one"),
    "seq-mean-token-sum": Divisor("sequences"),
    "seq-mean-token-mean": Divisor("sequences", per_sequence=True),
    "seq-mean-token-sum-norm": Divisor("sequences", length=True),
}

AGGREGATIONS = {
    convention.name: convention
    for convention in (
        AggregationConvention("exact", _VERL_MODES),
        AggregationConvention(
            "verl",
            _VERL_MODES,
            sequence_epsilon=1e-8,
            empty="nan",
        ),
        AggregationConvention(
            "trl",
            {
                "grpo": Divisor("rows", per_sequence=True),
                "bnpo": Divisor("tokens", count_floor=1.0),
                "dr_grpo": Divisor("rows", length=True),
                "dapo": Divisor("tokens", count_floor=1.0),
                "luspo": Divisor("rows", sequence_losses=True),
            },
            sequence_floor=1.0,
        ),
        AggregationConvention(
            "tunix",
            {
                "token-mean": Divisor("tokens", count_floor=1.0),
                "sequence-mean-token-mean": Divisor(
                    "sequences", per_sequence=True, count_floor=1.0
                ),
                "sequence-mean-token-scale": Divisor("sequences", length=True, count_floor=1.0),
                "seq-mean-token-sum": Divisor("sequences", count_floor=1e-6),
                "sequence-mean-token-sum-norm": Divisor("rows", count_floor=1e-6),
            },
            sequence_floor=1.0,
        ),
    )
}
"""The aggregation conventions by name: the library's ``"exact"`` and one per trainer."""


def aggregate_loss(
    losses,
    mask,
    mode: str,
    *,
    convention: str = "exact",
    length=None,
    count=None,
    axis_name=None,
) -> jax.Array:
    r"""The batch's per-token ``losses`` aggregated into one number, as the trainer's ``mode`` does.

    :math:`\ell = \frac{1}{D} \sum_b \frac{1}{r_b} \sum_t w_{bt} x_{bt}` (see
    the module), with :math:`D` and :math:`r_b` per convention and mode
    (:math:`N` tokens, :math:`S` non-empty sequences, :math:`B` rows,
    :math:`L` the ``length``):

    * ``"exact"`` (verl's names, exact arithmetic): ``"token-mean"``
      :math:`D = N`; ``"token-sum"`` :math:`D = 1`; ``"seq-mean-token-sum"``
      :math:`D = S`; ``"seq-mean-token-mean"`` :math:`r_b = n_b, D = S`;
      ``"seq-mean-token-sum-norm"`` :math:`D = S L`. A divisor of 0 (no
      tokens) gives 0.
    * ``"verl"`` (``agg_loss``, ``loss_agg_mode``): the same, with
      :math:`r_b = n_b + 10^{-8}`; no tokens gives NaN (0 / 0), but 0 for
      ``"token-sum"``.
    * ``"trl"`` (``GRPOTrainer``, ``loss_type``): ``"grpo"``
      :math:`r_b = \max(n_b, 1), D = B`; ``"bnpo"`` and ``"dapo"``
      :math:`D = \max(N, 1)`; ``"dr_grpo"`` :math:`D = B L` (``length``:
      its ``max_completion_length``); ``"luspo"`` :math:`D = B` (its
      sequence-level losses as ``(B, 1)``: :math:`\frac1B \sum_b n_b x_b`;
      per-token losses are refused, which TRL averages differently).
    * ``"tunix"`` (``aggregate_loss``, ``loss_agg_mode``):
      ``"token-mean"`` :math:`D = \max(N, 1)`;
      ``"sequence-mean-token-mean"`` :math:`r_b = \max(n_b, 1), D = \max(S, 1)`;
      ``"sequence-mean-token-scale"`` :math:`D = \max(S, 1) L`;
      ``"seq-mean-token-sum"`` :math:`D = \max(S, 10^{-6})`;
      ``"sequence-mean-token-sum-norm"`` :math:`D = \max(B, 10^{-6})` (its
      ``norm`` is ``count``; Tunix 0.1.7 divides by :math:`\max(S, 1)`
      instead, which is ``"seq-mean-token-sum"`` here).

    The trainers' code, read at these commits: verl-project/verl
    ``verl/trainer/ppo/core_algos.py`` (``agg_loss``) at
    ``1dda039b9c6311889a9c9a26040677e1254814f9``, after its pull request #5417
    (``seq-mean-token-sum-norm`` a sequence mean, :math:`L` by default the
    mask's last dimension) and without the ``dp_size**2`` denominator of #5798
    (every mode divides by the global count and multiplies by ``dp_size``, which
    FSDP's mean of the ranks cancels); huggingface/trl
    ``trl/trainer/grpo_trainer.py`` (``GRPOTrainer._compute_loss``) at
    ``f2cd57710ae345ea6428ae95363267fcf38a3dc8``; google/tunix
    ``tunix/rl/common.py`` (``aggregate_loss``) at
    ``c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3``.

    An empty sequence adds nothing to the sum; it counts in :math:`B`, not in
    :math:`S`. Positions of weight 0 are ignored, NaN and inf included (the
    trainers multiply them by the mask, so that an inf there makes their loss
    NaN).

    Across devices (``axis_name``), :math:`N`, :math:`S` and :math:`B` are
    those of every device's batch, and the function returns **this device's
    share** :math:`\frac1D \sum_{b \in \text{device}} \ldots`: the shares sum
    (``jax.lax.psum``) to the loss of the whole batch, and the gradient of a
    device's share with respect to its own tokens is the one-device gradient
    :math:`w_{bt} / (r_b D)`, so that the parameters' gradient is the sum
    (not the mean) of the devices' gradients. Over gradient-accumulation
    micro-batches, pass every call the ``count`` of all of them
    (:func:`aggregation_count` of each, summed): the micro-batches' losses
    and gradients then sum to those of the batch, TRL's ``dapo`` (its
    ``num_items_in_batch``) included.

    Args:
      losses: per-token losses, real, of the mask's shape ``(B, T)``, or one
        loss per sequence ``(B, 1)`` spread over its tokens.
      mask: the positions that count (response tokens), bool or 0/1, or a
        weight >= 0 per position, shape ``(B, T)``. A concrete weight that is
        negative or not finite is refused; a traced one makes the loss NaN.
      mode: the trainer's mode, in its own spelling (listed above).
      convention: ``"exact"``, ``"verl"``, ``"trl"`` or ``"tunix"``.
      length: :math:`L` for the modes that divide by it (verl's
        ``loss_scale_factor``, TRL's ``max_completion_length``, Tunix's
        ``norm`` of ``"sequence-mean-token-scale"``), at least the mask's
        last dimension ``T``; ``None``: ``T``. A traced length below ``T``
        gives NaN.
      count: the number :math:`D` counts (:math:`N`, :math:`S` or :math:`B`),
        accumulated beforehand over every device and micro-batch (verl's
        ``batch_num_tokens`` or ``global_batch_size``, TRL's
        ``num_items_in_batch``, Tunix's ``norm`` of
        ``"sequence-mean-token-sum-norm"``), finite and >= 0; the
        convention's floor still applies. ``None``: this batch's, over the
        devices of ``axis_name``. A traced count out of range gives NaN.
      axis_name: the mapped axis of the devices that hold the batch (inside
        ``shard_map``, ``pmap`` or ``vmap``).

    Returns:
      A scalar in the losses' floating dtype (float32 at least): the loss, or
      under ``axis_name`` this device's share of it.

    Raises:
      ValueError: naming the option or input, its value and what is valid.

    Examples:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> losses = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 0.0, 0.0, 0.0]])
      >>> mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], bool)
      >>> rn.aggregate_loss(losses, mask, "token-mean").item()  # 15 / 5 tokens
      3.0
      >>> rn.aggregate_loss(losses, mask, "seq-mean-token-mean").item()  # (10/4 + 5/1) / 2
      3.75
      >>> rn.aggregate_loss(losses, mask, "dr_grpo", convention="trl", length=5).item()
      1.5
    """
    divisor, rules = _mode(convention, mode)
    if length is not None and not divisor.length:
        raise ValueError(
            f"mode={mode!r} under convention={convention!r} divides by no length; pass "
            f"length=None, got length={checks.describe(length)}."
        )
    axis_name = rs.check_axis_name(axis_name)
    rs.participants(axis_name)  # an unbound axis_name is named before any collective
    losses, weights = _check_inputs(losses, mask, divisor, mode)
    tokens = weights.sum(axis=-1)
    total = _check_count(count, weights.dtype, divisor)
    if total is None:
        total = _batch_count(divisor.count, tokens, axis_name)
    if divisor.count_floor:
        total = jnp.maximum(total, divisor.count_floor)
    if divisor.length:
        total = total * _check_length(length, weights.shape[-1], weights.dtype)
    if rules.empty == "nan":
        scale = 1 / total
    else:  # a divisor of 0 (no tokens): the loss 0, with a gradient of 0
        scale = jnp.where(total == 0, 0, 1 / jnp.where(total == 0, 1, total))
    if divisor.per_sequence:
        # w / r_b is scale invariant in a row: each row's weights come scaled by the power of
        # two that brings its largest into [1, 2) (exactly; the convention's epsilon and floor
        # with them), so that a row of weights of any total sums without overflow.
        unit = 2 * power_of_two(jnp.max(weights, axis=-1, initial=0))
        weights = weights * unit[..., None]
        scale = scale / _sequence_divisor(rules, weights.sum(axis=-1), unit)
    # Each token's weight in the loss, its gradient: w / (r_b D). Dividing before the sum
    # keeps a mean of large losses from overflowing.
    weighting = weights * jnp.reshape(scale, (-1, 1))
    return jnp.sum(jnp.where(weights != 0, losses, 0) * weighting)


def _sequence_divisor(rules: AggregationConvention, tokens: jax.Array, unit) -> jax.Array:
    """Each sequence's :math:`r_b`: its token weight, guarded; 1 for an empty one (its sum is 0).

    ``tokens`` are in units of ``unit`` (a power of two per row), and so are the guards.
    """
    divisor = tokens + rules.sequence_epsilon * unit
    if rules.sequence_floor:
        divisor = jnp.maximum(divisor, rules.sequence_floor * unit)
    return jnp.where(divisor == 0, 1, divisor)


def aggregation_count(mask, mode: str, *, convention: str = "exact", axis_name=None) -> jax.Array:
    r"""The number ``mode`` divides by, :math:`N`, :math:`S` or :math:`B`, of this batch.

    For gradient accumulation: the sum of the micro-batches' counts, passed
    as :func:`aggregate_loss`'s ``count`` to each micro-batch, makes their
    losses sum to the loss of the whole batch. With ``axis_name``, the count
    of every device's batch.

    Args:
      mask: see :func:`aggregate_loss`.
      mode: a mode that divides by a count (not ``"token-sum"``).
      convention: see :func:`aggregate_loss`.
      axis_name: see :func:`aggregate_loss`.

    Returns:
      The count, a scalar in the mask's dtype if floating, else the default
      float (before the convention's floor).

    Examples:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> masks = [np.array([[1, 1, 0], [1, 0, 0]]), np.array([[1, 1, 1], [0, 0, 0]])]
      >>> total = sum(rn.aggregation_count(m, "dapo", convention="trl") for m in masks)
      >>> total.item()
      6.0
    """
    divisor, _ = _mode(convention, mode)
    if divisor.count == "one":
        raise ValueError(
            f"mode={mode!r} under convention={convention!r} divides by no count: its "
            "micro-batches' losses sum as they are."
        )
    axis_name = rs.check_axis_name(axis_name)
    rs.participants(axis_name)
    weights = _check_mask(mask, checks.as_floating("mask", mask).dtype)
    return _batch_count(divisor.count, weights.sum(axis=-1), axis_name)


def _batch_count(count: str, tokens: jax.Array, axis_name) -> jax.Array:
    """The batch's :math:`N`, :math:`S` or :math:`B` (1 for ``"one"``) over every device.

    ``tokens``: each sequence's token weight :math:`n_b`, in the loss's dtype.
    """
    if count == "one":
        return jnp.ones((), tokens.dtype)
    if count == "tokens":
        total = tokens.sum()
    elif count == "sequences":
        total = (tokens > 0).sum().astype(tokens.dtype)
    else:  # "rows"
        total = jnp.ones_like(tokens).sum()
    return total if axis_name is None else jax.lax.psum(total, axis_name)


def _mode(convention, mode) -> tuple[Divisor, AggregationConvention]:
    rules = AGGREGATIONS[checks.check_choice("convention", convention, tuple(AGGREGATIONS))]
    if not (isinstance(mode, str) and mode in rules.modes):
        raise ValueError(
            f"mode should be one of {', '.join(map(repr, rules.modes))} under "
            f"convention={convention!r}, got mode={mode!r}."
        )
    return rules.modes[mode], rules


def _check_mask(mask, dtype) -> jax.Array:
    weights = checks.as_weights("mask", mask, dtype)
    if weights.ndim != 2:
        raise ValueError(
            f"mask has shape {weights.shape}; expected (B, T): one row of T positions per sequence."
        )
    return weights


def _check_inputs(losses, mask, divisor: Divisor, mode: str) -> tuple[jax.Array, jax.Array]:
    """Floating ``losses`` broadcast to the mask's ``(B, T)``, and the mask as weights."""
    losses = checks.as_floating("losses", losses)
    weights = _check_mask(mask, losses.dtype)
    if divisor.sequence_losses and losses.shape[-1:] != (1,):
        raise ValueError(
            f"losses has shape {losses.shape}; mode={mode!r} takes one loss per sequence, "
            f"shape ({weights.shape[0]}, 1)."
        )
    return broadcast_to_mask("losses", losses, weights, "loss"), weights


def _check_count(count, dtype, divisor: Divisor) -> jax.Array | None:
    """``count`` as a scalar of ``dtype``: checked if concrete, NaN if traced out of range."""
    if count is None:
        return None
    if divisor.count == "one":
        raise ValueError(
            f"this mode divides by no count; pass count=None, got count={checks.describe(count)}."
        )
    if isinstance(count, jax.core.Tracer):
        if count.shape != ():
            raise ValueError(f"count should be a scalar, got {checks.describe(count)}.")
        count = jnp.asarray(count, dtype)
        return jnp.where((count >= 0) & jnp.isfinite(count), count, jnp.nan)
    if not (checks.is_real(count, "count") and math.isfinite(count) and count >= 0):
        raise ValueError(
            f"count should be a finite number >= 0 (the tokens or sequences of every device and "
            f"micro-batch), got count={checks.describe(count)}."
        )
    return jnp.asarray(count, dtype)


def _check_length(length, last: int, dtype) -> jax.Array:
    """:math:`L`: ``last`` for None; a concrete one >= ``last``, a traced one NaN if below it."""
    if length is None:
        return jnp.asarray(last, dtype)
    if isinstance(length, jax.core.Tracer):
        if length.shape != ():
            raise ValueError(f"length should be a scalar, got {checks.describe(length)}.")
        length = jnp.asarray(length, dtype)
        return jnp.where((length >= last) & jnp.isfinite(length), length, jnp.nan)
    if not (checks.is_real(length, "length") and math.isfinite(length) and length >= max(last, 1)):
        raise ValueError(
            f"length should be a finite number >= the mask's last dimension {last} (the "
            f"length the responses are padded to), got length={length!r}."
        )
    return jnp.asarray(length, dtype)
