r"""The reward-normalization math, written once against an array namespace.

Every function here takes the array namespace ``xp`` (``jax.numpy`` or
``numpy``) and uses ordinary arithmetic, comparisons and a few of its
functions (``where`` through :func:`select`, ``sqrt``, ``maximum``,
``minimum``). The JAX transforms call them with ``jax.numpy`` under ``jit``;
the Gymnasium adapters call the very same functions with ``numpy`` on the
host in float64: on NumPy arrays for vector environments, and on Python
floats and booleans for one environment, where an operator costs tens of
nanoseconds and a NumPy call about a microsecond. So finiteness is tested
with operators (:math:`|x| < \infty`, and :math:`x = x` for "not NaN"), and
:func:`select` picks in Python when its condition is a host boolean.

Batch moments are the exception, computed where they are cheapest: the host
adapters with NumPy's two passes (:func:`batch_moments`), the JAX transforms
from sums shifted by one of the batch's values (:func:`moments_from_shifted_sums`).
"""

import math
from collections.abc import Callable
from typing import Any

import numpy as np

Array = Any
LearnReturns = Callable[[Any, Array, Array], Any]


def select(xp, condition, x, y):
    """``xp.where(condition, x, y)``, picked in Python for a host boolean condition.

    A Python or NumPy ``bool`` (a static flag under ``jit``, or a host value)
    returns ``x`` or ``y`` as it is, without broadcasting; any array
    condition goes to ``xp.where``.

    Example:
      >>> select(np, True, 1.0, 2.0), select(np, np.array([True, False]), 1.0, 2.0)
      (1.0, array([1., 2.]))
    """
    if isinstance(condition, (bool, np.bool_)):
        return x if condition else y
    return xp.where(condition, x, y)


def discounted_return(xp, ret, reward, gamma, reset_before, valid, active=None):
    r"""One step of the tracked discounted return.

    .. math::
        G' = \begin{cases}
            \gamma\, G\, (1 - d) + r & \text{valid (active, finite reward)} \\
            G\, (1 - d) & \text{active, non-finite reward (step skipped)} \\
            G & \text{inactive (autoreset step)}
        \end{cases}

    where ``d`` is the episode-boundary flag that resets the return *before*
    the reward is added (``terminated`` for Gymnasium, ``terminated |
    truncated`` for PureJaxRL, never for SB3).

    Args:
        xp: array namespace.
        ret: current return ``G``.
        reward: reward ``r`` of this step.
        gamma: discount factor.
        reset_before: boolean ``d``.
        valid: boolean, the reward is finite and the environment active.
        active: boolean, the environment took part in this step; ``None``
            when every environment did.

    Returns:
        The new return ``G'``.

    Example:
        >>> discounted_return(np, 2.0, 1.0, 0.5, False, True)
        2.0
    """
    if active is not None:  # an inactive environment keeps its return as it is
        reset_before = active & reset_before
    carried = select(xp, reset_before, 0.0, ret)
    # A non-finite reward is never selected: its sum is computed and dropped.
    return select(xp, valid, carried * gamma + reward, carried)


def return_step(
    xp,
    ret,
    stats,
    reward,
    terminated,
    truncated,
    update_stats,
    valid,
    active,
    *,
    gamma,
    semantics,
    learn_returns: LearnReturns,
):
    r"""One environment step of the return recurrence and its statistics.

    Advances the return with :func:`discounted_return`, lets
    ``learn_returns(stats, G', mask)`` fold the returns selected by ``valid &
    update_stats`` into the statistics, then applies the freeze rule and the
    post-update reset of ``semantics`` (a
    :class:`~rewardnorm_jax.Semantics`). The JAX transforms call it on
    checked, broadcast arrays; the Gymnasium adapters on NumPy arrays or
    Python scalars.

    Args:
        xp: array namespace.
        ret: current return ``G``.
        stats: the statistics, passed to ``learn_returns`` untouched.
        reward: rewards ``r``.
        terminated: boolean episode flags.
        truncated: boolean episode flags.
        update_stats: boolean (scalar), whether the statistics learn.
        valid: boolean, the reward is finite and the environment active.
        active: boolean, the environment took part in this step, or ``None``.
        gamma: discount factor.
        semantics: the reset and freeze conventions.
        learn_returns: ``learn_returns(stats, returns, mask) -> stats``, the
            statistics with the selected returns folded in.

    Returns:
        ``(G', stats')``.

    Example:
        >>> from rewardnorm_jax._src.core import semantics as sem
        >>> count = lambda n, g, mask: n + mask
        >>> return_step(np, 1.0, 0, 2.0, False, False, True, True, None, gamma=0.5,
        ...             semantics=sem.GYMNASIUM, learn_returns=count)
        (2.5, 1)
    """
    new_ret = discounted_return(
        xp,
        ret,
        reward,
        gamma,
        semantics.flag("reset_before", terminated, truncated),
        valid,
        active,
    )
    stats = learn_returns(stats, new_ret, valid & update_stats)
    if semantics.freeze_stops_return:  # SB3: a frozen step does not accumulate ...
        new_ret = select(xp, update_stats, new_ret, ret)
    # ... but an episode end zeroes the return whether frozen or not.
    if semantics.reset_after != "never":
        new_ret = select(xp, semantics.flag("reset_after", terminated, truncated), 0.0, new_ret)
    return new_ret, stats


def batch_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean and population variance of a non-empty batch along its first axis.

    .. math::
        \mu_b = \frac{1}{n_b} \sum_i x_i, \quad
        \sigma_b^2 = \frac{1}{n_b} \sum_i (x_i - \mu_b)^2

    Two passes (mean first, then deviations), so the moments stay accurate when
    ``|mean| >> std``: the arithmetic of ``numpy.mean`` / ``numpy.var``
    (pairwise sums, the dtype of ``x``), which Gymnasium's ``RunningMeanStd``
    uses. An infinite entry makes the moments infinite or NaN, which
    :func:`add_batch_moments` turns into a saturated :math:`M = +\infty`. The
    host adapters select their batch before calling; the JAX transforms
    compute their moments from shifted sums instead
    (:func:`moments_from_shifted_sums`).

    Args:
        x: values, shape ``(n_b, ...)`` with ``n_b > 0``.

    Returns:
        ``(mu_b, var_b)`` in the dtype of ``x``.

    Example:
        >>> [float(m) for m in batch_moments(np.array([1.0, 2.0, 3.0, 6.0]))]
        [3.0, 3.5]
    """
    count = x.shape[0]
    mean = np.add.reduce(x) / count
    deviation = x - mean
    return mean, np.add.reduce(deviation * deviation) / count


def moments_from_shifted_sums(xp, batch_count, deviation_sum, square_sum):
    r"""Count, mean (as its deviation from the shift) and population variance of a batch.

    With :math:`d_i = x_i - s` over the :math:`n_b` selected entries (``shift``
    :math:`s` one of the batch's values, so that :math:`|d_i|` is of the order
    of the spread):

    .. math::
        \mu_b = s + \frac{\sum_i d_i}{n_b}, \qquad
        \sigma_b^2 = \frac{\sum_i d_i^2}{n_b} - \Big(\frac{\sum_i d_i}{n_b}\Big)^2

    One pass over the batch gives all three sums, and the shift keeps the
    difference well conditioned when :math:`|\mu_b| \gg \sigma_b` (shifting by
    0 would cancel catastrophically). Rounding can
    make the difference slightly negative: it is clamped at 0. With
    :math:`n_b = 0` the mean is the shift and the variance 0.

    The mean is returned as :math:`\mu_b - s`, unrounded by the shift's size, so
    that the merge can take its deviation from the running mean exactly
    (:func:`~rewardnorm_jax._src.stats.running.merge_checked`).

    Args:
        xp: array namespace.
        batch_count: :math:`n_b`.
        deviation_sum: :math:`\sum_i d_i`.
        square_sum: :math:`\sum_i d_i^2`.

    Returns:
        ``(n_b, mu_b - s, var_b)``.

    Example:
        >>> moments = moments_from_shifted_sums(np, 3.0, 3.0, 5.0)  # x = 1, 2, 3; s = 1
        >>> [round(float(m), 4) for m in moments]
        [3.0, 1.0, 0.6667]
    """
    divisor = xp.maximum(batch_count, 1.0)
    mean_deviation = deviation_sum / divisor
    var = xp.maximum(square_sum / divisor - mean_deviation * mean_deviation, 0.0)
    return batch_count, mean_deviation, var


def chan_increments(weight, delta, batch_count, batch_var):
    r"""Increments of the running mean and M2 when a batch joins them.

    The parallel algorithm of Chan et al. (as in Gymnasium's and SB3's
    ``RunningMeanStd``), with :math:`n` the statistics' total weight
    (``weight``: samples plus the prior, or the discounted weight),
    :math:`\delta = \mu_b - \mu` (``delta``) and :math:`n' = n + n_b`:

    .. math::
        \Delta\mu = \delta \frac{n_b}{n'}, \qquad
        \Delta M = \sigma_b^2 n_b + \delta^2 \frac{n\, n_b}{n'}

    so that :math:`\mu' = \mu + \Delta\mu`, :math:`M' = M + \Delta M` and
    :math:`\sigma'^2 = M' / n'`. Plain arithmetic: works on any numeric type.

    Returns:
        ``(delta_mean, delta_m2, new_weight)``.
    """
    new_weight = weight + batch_count
    ratio = batch_count / new_weight
    # n n_b / n' first: no intermediate overflows unless the increment does.
    delta_m2 = batch_var * batch_count + delta * (delta * (weight * ratio))
    return delta * ratio, delta_m2, new_weight


def two_sum(xp, high, low, increment):
    """Adds ``increment`` to the unevaluated sum ``high + low`` (Knuth's TwoSum).

    Returns the new ``(high, low)``: ``high`` is the rounded sum and ``low``
    carries its rounding error, so the pair holds about twice the working
    precision. A sum that overflows keeps its infinity with a zero error term
    (the error formula gives ``inf - inf = NaN`` exactly then).

    Example:
        >>> two_sum(np, 1.0, 0.0, 2.0**-60)
        (1.0, 8.673617379884035e-19)
    """
    addend = increment + low
    total = high + addend
    rounded = total - high
    error = (high - (total - rounded)) + (addend - rounded)
    return total, select(xp, error == error, error, 0.0)


def _mean_increment(xp, delta, delta_low, ratio, rest):
    r"""The mean's increment :math:`\delta \, n_b / n'` as ``head + tail``, ``head`` added first.

    ``ratio`` is :math:`n_b / n'` and ``rest`` :math:`n / n'`. A rounded
    :math:`\delta \cdot n_b / n'` is off by half an ulp of the increment: as
    much as the mean's own rounding when the batch holds most of the weight (a
    first batch, whose :math:`\delta` is the whole mean). There the increment
    is :math:`\delta - \delta \, n / n'`: ``delta`` exactly, then a small
    product whose rounding is small; elsewhere the product's rounding is small
    beside the mean. ``delta_low`` joins the tail at the same ratio.
    """
    mostly_batch = ratio > 0.5
    head = select(xp, mostly_batch, delta, delta * ratio)
    tail = select(xp, mostly_batch, -(delta * rest), 0.0) + delta_low * ratio
    return head, tail


def add_batch_moments(
    xp, mean, mean_low, m2, m2_low, weight, batch_count, delta, batch_var, delta_low=0.0
):
    r"""Adds a batch, given by its moments, to compensated running moments.

    The running moments are the mean :math:`\mu` and the sum of squared
    deviations :math:`M`, each an unevaluated sum of two floats (``mean +
    mean_low``, ``m2 + m2_low``), of total weight :math:`n` (``weight``). The
    increments of :func:`chan_increments` (the Chan et al. merge) are added
    with :func:`two_sum`, so rounding errors are carried instead of lost.

    Range: increments that exceed the dtype (returns whose square overflows)
    saturate :math:`M` at ``+inf`` (the variance becomes ``+inf``); a mean
    increment that overflows is dropped, so the mean keeps its last
    representable value, and nothing becomes NaN.

    Args:
        xp: array namespace.
        mean: running mean.
        mean_low: rounding error carried with ``mean``.
        m2: running sum of squared deviations :math:`M`.
        m2_low: rounding error carried with ``m2``.
        weight: their total weight :math:`n` (samples plus the prior's
            ``1e-4``, or the discounted weight of exponential moving statistics).
        batch_count: number of samples :math:`n_b` in the batch (0 changes nothing).
        delta: the batch's mean minus the running mean, :math:`\mu_b - (\mu +
            \mu_{low})`, computed by the caller with the low word kept
            (``(mu_b - mean) - mean_low``): ``mean + mean_low`` rounds the low word away.
        batch_var: the batch's population variance :math:`\sigma_b^2`.
        delta_low: the rounding error of ``delta`` (its exact value is ``delta +
            delta_low``), carried into the mean's low word.

    Returns:
        ``(mean, mean_low, m2, m2_low)`` with the batch added.

    Example:
        >>> add_batch_moments(np, 0.0, 0.0, 1.0, 0.0, 1.0, 1, 2.0, 0.0)  # n = 1, x = 2
        (1.0, 0.0, 3.0, 0.0)
    """
    _, delta_m2, new_weight = chan_increments(weight, delta, batch_count, batch_var)
    head, tail = _mean_increment(
        xp, delta, delta_low, batch_count / new_weight, weight / new_weight
    )
    mean_finite = abs(head) < math.inf  # false for +-inf and NaN
    head, tail = select(xp, mean_finite, head, 0.0), select(xp, mean_finite, tail, 0.0)
    delta_m2 = select(xp, mean_finite & (delta_m2 == delta_m2), delta_m2, math.inf)
    mean, mean_low = two_sum(xp, mean, mean_low, head)
    mean, mean_low = two_sum(xp, mean, mean_low, tail)
    m2, m2_low = two_sum(xp, m2, m2_low, delta_m2)
    return mean, mean_low, m2, m2_low


def scale_by_std(xp, reward, var, epsilon, clip, passthrough):
    r"""Divide by the running standard deviation, optionally clip.

    .. math::
        \tilde r = \operatorname{clip}\!\left(\frac{r}{\sqrt{\sigma^2 + \epsilon}},
            -c, c\right)

    The mean is not subtracted (reward scaling keeps the sign of rewards).
    Entries where ``passthrough`` is true are returned unchanged (non-finite
    rewards stay visible to the caller).

    Args:
        xp: array namespace.
        reward: rewards.
        var: running variance (broadcastable to ``reward``).
        epsilon: added to the variance.
        clip: bound ``c`` of the symmetric clip, or ``None``.
        passthrough: boolean mask of entries to leave as they are.
    """
    return clip_scaled(xp, reward / xp.sqrt(var + epsilon), reward, clip, passthrough)


def clip_scaled(xp, scaled, reward, clip, passthrough):
    """The scaled rewards clipped to ``[-clip, clip]``, ``reward`` where ``passthrough``.

    The tail of :func:`scale_by_std`, for callers that scale by a reciprocal
    standard deviation computed beforehand (the JAX step computes it in the
    kernel that merges the statistics).
    """
    if clip is not None:
        scaled = xp.maximum(xp.minimum(scaled, clip), -clip)
    return select(xp, passthrough, reward, scaled)
