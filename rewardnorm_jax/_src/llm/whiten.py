r"""Masked whitening: token values standardized over every masked-in token of the batch.

PPO and REINFORCE-style trainers for language models whiten their token-level
advantages over the batch's response tokens. With :math:`m_t \ge 0` the mask
(0/1 flags, or weights), :math:`W = \sum_t m_t`, and the sums over the
positions where :math:`m_t \ne 0`:

.. math::

    \bar x = \tfrac1W \textstyle\sum_t m_t x_t, \qquad
    v = \tfrac{1}{W - \text{ddof}} \textstyle\sum_t m_t (x_t - \bar x)^2, \qquad
    y_t = \frac{x_t - \bar x}{\sqrt{v}} \ \ (+\, \bar x \text{ if not shift\_mean})

where the trainers replace :math:`\sqrt v` by :math:`\sqrt{v + 10^{-8}}` (verl,
Tunix, which also divide both sums by :math:`W + 10^{-8}`) or
:math:`\sqrt{\max(v, 10^{-8})}` (OpenRLHF, with ddof 0). Each trainer's rule
is one :class:`WhiteningConvention`. The statistics are the group statistics
of :mod:`~rewardnorm_jax._src.llm.moments` over one group, the batch (across
devices with an ``axis_name``), weighted by the mask: a constant batch gives
exactly 0 where no count epsilon moves the mean, and a value at a masked-out
position, NaN included, never reaches them.
"""

import dataclasses

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.llm import layout as layouts
from rewardnorm_jax._src.llm.moments import deviations, moments, variance
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats.summation import power_of_two


@dataclasses.dataclass(frozen=True)
class WhiteningConvention:
    r"""One trainer's masked whitening.

    Attributes:
      ddof: the delta degrees of freedom of the variance.
      epsilon: the variance's guard: added to it (``floor=False``), or its
        floor (``floor=True``); 0 for none.
      floor: whether ``epsilon`` is a floor, :math:`\max(v, \epsilon)`.
      count_epsilon: added to the total weight :math:`W` that the mean and
        the variance divide by (verl's and Tunix's ``masked_mean``); 0 for none.
      singleton: what a batch of total weight ``ddof`` or less (one masked-in
        token of a 0/1 mask) gives: ``"zero"``, or ``"refused"`` (NaN: verl
        raises, Tunix's Bessel factor is 1/0 at a weight of 1, and a weight
        below 1 makes their variance negative).
      invalid: what a NaN (or infinite) value at a masked-in position does:
        ``"dropped"`` (left out of the statistics, its output NaN) or
        ``"spreads"`` (every output of the batch NaN, as the trainers' sums do).
    """

    name: str
    ddof: int
    epsilon: float
    floor: bool
    count_epsilon: float
    singleton: str
    invalid: str


WHITENING = {
    convention.name: convention
    for convention in (
        WhiteningConvention("exact", 1, 0.0, False, 0.0, "zero", "dropped"),
        WhiteningConvention("verl", 1, 1e-8, False, 1e-8, "refused", "spreads"),
        WhiteningConvention("tunix", 1, 1e-8, False, 1e-8, "refused", "spreads"),
        WhiteningConvention("openrlhf", 0, 1e-8, True, 0.0, "zero", "spreads"),
    )
}
"""The whitening conventions by name: the library's ``"exact"`` and one per trainer."""


def masked_whiten(
    values,
    mask,
    *,
    convention: str = "exact",
    shift_mean: bool = True,
    axis_name=None,
) -> jax.Array:
    r"""``values`` whitened over the masked-in positions of the batch; 0 where masked out.

    Conventions (``ddof``, the guard on the variance :math:`v`, the count
    epsilon, a mask of total weight ``ddof`` or less such as one masked-in
    token, a NaN at a masked-in position):

    * ``"exact"`` (default): ddof 1, :math:`1/\sqrt v`, none, output 0, the
      NaN left out of the statistics and its output NaN;
    * ``"verl"`` (``verl.utils.torch_functional.masked_whiten``) and
      ``"tunix"`` (``tunix.rl.algo_core.masked_whiten``): ddof 1,
      :math:`1/\sqrt{v + 10^{-8}}`, the mean and the variance divide by
      :math:`W + 10^{-8}` (their ``masked_mean``), NaN (verl raises for a
      weight of 0 or 1; at 1 their Bessel factor is 1/0, and below 1 it
      makes their variance negative), every masked-in output NaN;
    * ``"openrlhf"`` (its advantage normalization for ``gae``, ``reinforce``
      and ``reinforce_baseline``): ddof 0, :math:`1/\sqrt{\max(v, 10^{-8})}`,
      none, output 0, every masked-in output NaN.

    A mask is taken as the trainers take it, multiplied in: bools and 0/1
    flags select tokens, and any other weights :math:`m_t \ge 0` weigh them
    (frequency weights: :math:`W = \sum_t m_t` stands for the count), concrete
    or traced alike. A concrete weight that is negative or not finite is
    refused; a traced one makes the outputs NaN. Each output is the whitened
    value, not multiplied by its weight. verl's REINFORCE++-baseline and GDPO
    whiten ``score * mask`` and multiply the result by the mask: with a
    weighted mask, ``masked_whiten(scores[:, None] * mask, mask, convention="verl")
    * mask`` gives their numbers (with a 0/1 mask, ``scores[:, None]`` alone).

    A constant batch gives exactly 0 (``shift_mean=False``: the constant),
    except under ``"verl"`` and ``"tunix"``: their count epsilon puts the
    mean :math:`10^{-8} \bar x / (W + 10^{-8})` below the values, which the
    guard scales to about :math:`10^{-4} \bar x / W` (their numbers in exact
    arithmetic, in float32 as in float64). A batch without masked-in tokens
    gives 0 everywhere (verl raises, OpenRLHF divides 0 by 0, Tunix
    multiplies by :math:`10^4`), and values at masked-out positions are
    ignored: Tunix and OpenRLHF multiply them by the mask, so that one NaN or
    inf there turns every output into NaN, and verl's outputs at those
    positions are NaN. Without a guard (``"exact"``), a batch whose squared
    spread the dtype cannot hold (beyond about 1e19 or below 1e-19 in
    float32) gives NaN.

    The outputs are targets, as in the trainers, which compute them without
    gradients: no gradient flows back into ``values``.

    Args:
      values: real values, of the mask's shape or broadcastable to it: token
        values ``(B, T)``, or one value per sequence ``(B, 1)`` spread over its
        tokens (REINFORCE++-baseline and GDPO whiten their sequence scores so).
      mask: the positions that count (response tokens), bool or 0/1, or a
        weight :math:`\ge 0` per position; any shape.
      convention: ``"exact"``, ``"verl"``, ``"tunix"`` or ``"openrlhf"``.
      shift_mean: False adds the mean back after scaling (verl's option).
      axis_name: the mapped axis of the devices that hold the batch (inside
        ``shard_map``, ``pmap`` or ``vmap``): the statistics are those of the
        masked-in tokens of every device.

    Returns:
      The whitened values, of the mask's shape, in the values' floating dtype
      (float32 at least); 0 at every masked-out position.

    Raises:
      ValueError: naming the option or input, its value and what is valid.

    Examples:
      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> values = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, 0.0]])
      >>> mask = np.array([[True, True, True], [True, False, False]])
      >>> print(np.asarray(rn.masked_whiten(values, mask)).round(4))
      [[-1.1619 -0.3873  0.3873]
       [ 1.1619  0.      0.    ]]
    """
    rules = WHITENING[checks.check_choice("convention", convention, tuple(WHITENING))]
    shift_mean = checks.check_bool("shift_mean", shift_mean)
    axis_name = rs.check_axis_name(axis_name)
    rs.participants(axis_name)  # an unbound axis_name is named before any collective
    values, weights = _check_inputs(values, mask)
    batch = layouts.Whole(axis_name)
    flat, weights = values.reshape(-1), weights.reshape(-1)
    kept = weights != 0
    valid = kept & jnp.isfinite(flat)
    # Weights at the power of two that brings the largest into [0.5, 1): their total fits the
    # dtype, and ddof and the count epsilon, in units of the weights, are scaled alike.
    unit = batch.rows(power_of_two(batch.largest(weights, kept)))
    stats = moments(batch, flat, valid, weights * unit, heaviest=True)
    spread, offset = _spread(rules, stats, unit)
    if rules.floor:
        spread = jnp.maximum(spread, rules.epsilon)
    elif rules.epsilon:
        spread = spread + rules.epsilon
    whitened = (deviations(batch, stats, flat) + batch.rows(offset)) * jax.lax.rsqrt(
        batch.rows(spread)
    )
    if not rules.count_epsilon:
        # A constant batch's deviations are 0 by construction; without a guard, 0 * rsqrt(0) is NaN.
        whitened = jnp.where(batch.rows(stats.constant), 0, whitened)
    # Too little weight for the variance's degrees of freedom (one token of a 0/1 mask).
    too_little = batch.rows(stats.weight) <= rules.ddof * unit
    whitened = jnp.where(too_little, jnp.nan if rules.singleton == "refused" else 0, whitened)
    if not shift_mean:
        whitened = whitened + batch.rows(stats.shift + stats.mean - offset)
    if rules.invalid == "dropped":
        whitened = jnp.where(valid, whitened, jnp.nan)
    else:  # "spreads": one invalid masked-in value makes every output NaN
        (invalid,) = batch.sums((kept & ~valid).astype(flat.dtype))
        whitened = jnp.where(batch.rows(invalid) > 0, jnp.nan, whitened)
    return jnp.where(kept, whitened, 0).reshape(values.shape)


def _spread(rules: WhiteningConvention, stats, unit) -> tuple[jax.Array, jax.Array]:
    r"""The convention's variance before its guard, and its mean's offset below the true mean.

    A trainer that divides its sums by :math:`W + \epsilon_n` takes the mean
    :math:`\bar x - \delta` with :math:`\delta = \epsilon_n \bar x / (W + \epsilon_n)`,
    and the variance :math:`\frac{S + W \delta^2}{W + \epsilon_n} \frac{W}{W - \text{ddof}}`,
    :math:`S` the weighted sum of squared deviations from :math:`\bar x`. The
    weights of ``stats`` are taken at the power of two ``unit`` (a weight of 1
    is ``unit``), and so are :math:`\epsilon_n` and ddof: a power of two
    scales :math:`W`, :math:`S` and both alike, exactly.
    """
    offset = jnp.zeros_like(stats.mean)
    if rules.count_epsilon:
        weight, epsilon = stats.weight, rules.count_epsilon * unit
        offset = epsilon * (stats.shift + stats.mean) / (weight + epsilon)
        squares = (stats.squares + weight * offset * offset) * (weight / (weight + epsilon))
        stats = stats._replace(squares=squares)
    spread = variance(stats, rules.ddof * unit)
    if rules.epsilon:  # a variance that underflowed to 0 is 0 beside the guard
        spread = jnp.where(stats.squares == 0, 0, spread)
    return spread, offset


def _check_inputs(values, mask) -> tuple[jax.Array, jax.Array]:
    """Floating ``values`` broadcast to the mask's shape, and the mask as weights of their dtype."""
    # Whitened advantages are targets: no gradient flows back into the values.
    values = jax.lax.stop_gradient(checks.as_floating("values", values))
    weights = checks.as_weights("mask", mask, values.dtype)
    if weights.ndim == 0:
        raise ValueError("mask is a scalar; pass one entry per position, of the values' shape.")
    return broadcast_to_mask("values", values, weights, "value"), weights


def broadcast_to_mask(name: str, values: jax.Array, weights: jax.Array, what: str) -> jax.Array:
    """``values`` broadcast to the mask's shape: one ``what`` per position, or per sequence.

    Raises:
      ValueError: naming ``name``, for values of another rank or shape.
    """
    same_rank = values.ndim == weights.ndim  # (B,) against (B, T) would spread along tokens
    if not same_rank or checks.broadcast_shape(values.shape, weights.shape) != weights.shape:
        raise ValueError(
            f"{name} has shape {values.shape}, which does not broadcast to the mask's shape "
            f"{weights.shape} with as many axes: pass one {what} per position, or one {what} "
            f"per sequence of shape {(*weights.shape[:-1], 1)}."
        )
    return jnp.broadcast_to(values, weights.shape)
