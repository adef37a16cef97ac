r"""Each group's mean and spread, accurate in float32, exactly 0 for a constant group.

The plain formula leaves a residue in a constant group: seven float32 values
of 1000/7 have a rounded mean one ulp away from them, a two-pass standard
deviation of 1.6e-5, and a standardized advantage of -0.87 where the exact
one is 0. Here:

1. each group's values are shifted by one of its own valid values :math:`c`
   (a subtraction that is exact where the values are within a factor of 2 of
   each other, as in a near-constant group), so the sums below are of
   deviations of the group's own spread, not of the values;
2. one pass sums, per group, the valid count :math:`n`, :math:`\sum_i |e_i|`,
   :math:`\sum_i e_i` and :math:`\sum_i e_i^2`, with :math:`e_i = x_i - c`;
   a group is **constant** exactly when :math:`\sum_i |e_i| = 0`, and its
   deviations are then 0 by construction, not by rounding;
3. the mean and the sum of squared deviations follow:

.. math::

    m = \tfrac1n \textstyle\sum_i e_i, \qquad
    S = \textstyle\sum_i e_i^2 - m \left(2 \sum_i e_i - n m\right), \qquad
    x_i - \bar x = e_i - m .

Since :math:`c` is a value of the group, :math:`n (c - \bar x)^2 \le (n - 1) S`,
so the cancellation in :math:`S` costs at most a factor :math:`n`: about
:math:`n^2 / 4` ulps in the standardized values, under 1e-5 in float32 up to
:data:`~rewardnorm_jax._src.llm.layout.ONE_PASS_LIMIT` answers. The
deviations :math:`e_i - m` are as exact as float32 sums of the deviations
allow: within a few ulps of the group's spread (not of each deviation: an
answer at the mean of rewards 1e4 +- 1e3 is off by about 1e-4). Groups larger than
:data:`~rewardnorm_jax._src.llm.layout.ONE_PASS_LIMIT` answers (ragged ids,
the batch) take one more pass, the same sums of :math:`e_i - m`, which
removes that factor (the corrected two-pass algorithm of Chan, Golub and
LeVeque, 1983). Invalid answers (NaN or infinite) are left out of every sum.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.stats.summation import power_of_two


class Moments(NamedTuple):
    """Per group: valid count and weight, shift, mean, sum of squares, whether it is constant."""

    valid_count: jax.Array  # valid answers
    weight: jax.Array  # their total weight (the valid count without weights)
    scale: jax.Array  # s, the power of two the values are taken at (1 unless scaled)
    shift: jax.Array  # c, a valid value of the group times s (0 for a group without one)
    mean: jax.Array  # the (weighted) mean of s x - c
    squares: jax.Array  # (weighted) sum of squared deviations from the mean; 0 if constant
    constant: jax.Array  # bool: the valid values are all equal (or there are none)


def moments(
    layout, values: jax.Array, valid: jax.Array, weights=None, *, heaviest=False, scaled=False
) -> Moments:
    r"""The :class:`Moments` of ``values`` in the groups of ``layout``.

    With weights :math:`w_i` (frequency weights: a weight counts as that many
    repeated entries), every sum above weighs its entry by :math:`w_i` and
    :math:`n` is :math:`W = \sum_i w_i`.

    Args:
      layout: a :mod:`~rewardnorm_jax._src.llm.layout` layout.
      values: floating values, one per answer (trailing axes hold independent
        values, each grouped alike).
      valid: bool, of ``values``' shape: the values that count.
      weights: ``None``, or a weight per answer (OPO's lengths, a weighted mask).
      heaviest: shift by a value of the largest weight, whose distance to the
        weighted mean is within the weighted spread whatever the other
        weights are (a weighted mask, where a large value may weigh nothing).
      scaled: take the moments of :math:`s x`, :math:`s` the power of two that
        brings each group's largest valid :math:`|x|` into [0.5, 1)
        (:func:`~rewardnorm_jax._src.stats.summation.power_of_two`), found in
        the pass that finds :math:`c`. A power of two moves only the
        exponent, so the moments of :math:`s x` are exact
        scalings of those of :math:`x` wherever these fit the dtype, and fit
        wherever the values do (rewards near the float32 limits, spreads of
        1e-30). Deviations and spreads are then in units of :math:`1 / s`.
    """
    candidates = valid
    if weights is not None:
        weights = jnp.where(valid, weights, 0).astype(values.dtype)
        if heaviest:
            candidates = valid & (weights == layout.rows(layout.largest(weights, valid)))
    if scaled:  # heaviest picks among the valid values: the largest |x| needs them all
        shift, largest = layout.reference_and_magnitude(values, valid)
        scale = power_of_two(largest)
        values, shift = values * layout.rows(scale), shift * scale
    else:
        shift = layout.reference(values, candidates)
        scale = jnp.ones_like(shift)
    shifted = jnp.where(valid, values - layout.rows(shift), 0)
    flags = valid.astype(values.dtype)
    if weights is None:
        count, magnitude, total, squares = layout.sums(
            flags, jnp.abs(shifted), shifted, shifted * shifted
        )
        weight = count
    else:
        weighted = weights * shifted
        count, magnitude, weight, total, squares = layout.sums(
            flags, jnp.abs(shifted), weights, weighted, weighted * shifted
        )
    mean = _ratio(total, weight)
    if weights is not None:  # valid answers of total weight 0 have no weighted mean
        mean = jnp.where((weight == 0) & (count > 0), jnp.nan, mean)
    squares = squares - (2 * total - weight * mean) * mean
    if not layout.one_pass:
        centred = jnp.where(valid, shifted - layout.rows(mean), 0)
        weighted = centred if weights is None else weights * centred
        total, squares = layout.sums(weighted, weighted * centred)
        correction = _ratio(total, weight)
        squares = squares - (2 * total - weight * correction) * correction
        mean = mean + correction
    constant = magnitude == 0
    return Moments(
        valid_count=count,
        weight=weight,
        scale=scale,
        shift=shift,
        mean=jnp.where(constant, 0, mean),
        squares=jnp.where(constant, 0, jnp.maximum(squares, 0)),
        constant=constant,
    )


def deviations(layout, moments: Moments, values: jax.Array) -> jax.Array:
    """Each value minus its group's (weighted) mean, at its scale: :math:`(s x_i - c) - m`."""
    return (values * layout.rows(moments.scale) - layout.rows(moments.shift)) - layout.rows(
        moments.mean
    )


def variance(stats: Moments, ddof: int) -> jax.Array:
    """The variance, with ``ddof`` delta degrees of freedom (NaN for too little weight).

    NaN also where the dtype cannot hold the group's sum of squares: a spread
    whose square overflows, or underflows to 0 in a group that is not constant.
    """
    out_of_range = ~jnp.isfinite(stats.squares) | ((stats.squares == 0) & ~stats.constant)
    return jnp.where(out_of_range, jnp.nan, stats.squares / (stats.weight - ddof))


def std(stats: Moments, ddof: int) -> jax.Array:
    """The standard deviation: the square root of :func:`variance`."""
    return jnp.sqrt(variance(stats, ddof))


def _ratio(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """``numerator / denominator``, 0 where the denominator is 0 (a group without valid answers)."""
    empty = denominator == 0
    return jnp.where(empty, 0, numerator / jnp.where(empty, 1, denominator))
