r"""The reward-normalization math, written once against an array namespace.

Every function here takes the array namespace ``xp`` (``jax.numpy``, ``numpy``,
or a scalar namespace with the same names: ``where``, ``sqrt``,
``maximum``, ``minimum``) and uses only those names plus ordinary
arithmetic. The JAX transforms call them with ``jax.numpy`` under ``jit``;
the Gymnasium adapters call the very same functions on NumPy float64 arrays
or Python floats, so there is one copy of each formula in the library.

Reductions over the batch are passed in as ``reduce``: a sum over the shared
axes (optionally followed by a cross-device ``psum``), or the identity for
per-environment statistics.
"""

from collections.abc import Callable
from typing import Any

Array = Any
Reduce = Callable[[Array], Array]


def discounted_return(xp, ret, reward, gamma, reset_before, valid, active):
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
        active: boolean, the environment took part in this step.

    Returns:
        The new return ``G'``.
    """
    carried = xp.where(reset_before, 0.0, ret)
    accumulated = carried * gamma + xp.where(valid, reward, 0.0)
    return xp.where(valid, accumulated, xp.where(active, carried, ret))


def batch_moments(xp, x, mask, reduce: Reduce):
    r"""Count, mean and population variance of the masked entries of ``x``.

    .. math::
        n_b = \sum_i m_i, \quad
        \mu_b = \frac{1}{n_b} \sum_i m_i x_i, \quad
        \sigma_b^2 = \frac{1}{n_b} \sum_i m_i (x_i - \mu_b)^2

    Two passes (mean first, then deviations), so the moments stay accurate when
    ``|mean| >> std``. Entries with ``m_i = 0`` may hold NaN or inf: they are
    selected away, never multiplied. A selected infinite entry still counts;
    its mean and variance are then infinite or NaN, which the merge turns into
    a saturated :math:`M = +\infty`. With ``n_b = 0`` the mean and variance are 0.
    All arithmetic stays in the dtype of ``x`` (as ``numpy.mean`` / ``numpy.var``
    do), so a float32 batch gives float32 moments.

    Args:
        xp: array namespace.
        x: values, any shape.
        mask: boolean, same shape as ``x``.
        reduce: sum over the axes the statistics are shared across.

    Returns:
        ``(n_b, mu_b, var_b)`` in the dtype of ``x``.
    """
    # Zeros in the dtype of x. A masked-in x may be infinite (a return that
    # overflowed the dtype), so it is clamped before the product: 0 * inf is NaN.
    zero = 0.0 * xp.where(mask, xp.minimum(xp.maximum(x, -1.0), 1.0), 0.0)
    count = reduce(xp.where(mask, zero + 1.0, zero))
    divisor = xp.maximum(count, 1.0)
    mean = reduce(xp.where(mask, x, zero)) / divisor
    deviation = xp.where(mask, x - mean, zero)
    return count, mean, reduce(deviation * deviation) / divisor


def chan_increments(count, mean, batch_count, batch_mean, batch_var):
    r"""Increments of the running mean and M2 when a batch joins them.

    The parallel algorithm of Chan et al. (as in Gymnasium's and SB3's
    ``RunningMeanStd``), with :math:`\delta = \mu_b - \mu` and
    :math:`n' = n + n_b`:

    .. math::
        \Delta\mu = \delta \frac{n_b}{n'}, \qquad
        \Delta M = \sigma_b^2 n_b + \delta^2 \frac{n\, n_b}{n'}

    so that :math:`\mu' = \mu + \Delta\mu`, :math:`M' = M + \Delta M` and
    :math:`\sigma'^2 = M' / n'`. Plain arithmetic: works on any numeric type.

    Returns:
        ``(delta_mean, delta_m2, new_count)``.
    """
    new_count = count + batch_count
    ratio = batch_count / new_count
    delta = batch_mean - mean
    # n n_b / n' first: no intermediate overflows unless the increment does.
    delta_m2 = batch_var * batch_count + delta * (delta * (count * ratio))
    return delta * ratio, delta_m2, new_count


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
    scaled = reward / xp.sqrt(var + epsilon)
    if clip is not None:
        scaled = xp.maximum(xp.minimum(scaled, clip), -clip)
    return xp.where(passthrough, reward, scaled)
