r"""Running statistics of the rewards per domain, for advantages normalized by them.

ROLL (``roll/utils/functionals.py`` ``reward_norm`` with ``norm_mean_type`` or
``norm_std_type`` ``"running"``, alibaba/ROLL
8eb27cc2dc34c4d1310b169d9b86d339004d811a) keeps one ``RunningMoments`` per data
domain (``roll/pipeline/rlvr/rlvr_pipeline.py``), merges each batch's rewards
into it, and only then normalizes the batch with it. Its moments start at
count 1e-24 (a prior of no weight) and its standard deviation is unbiased:

.. math::

    \mu_d = \frac{1}{n_d} \sum_i r_i, \qquad
    \sigma_d = \sqrt{\frac{\sum_i (r_i - \mu_d)^2}{n_d - \text{ddof}}}

over every reward of domain :math:`d` seen so far, this batch's included. The
statistics are the library's running statistics
(:func:`~rewardnorm_jax._src.stats.running.merge_keyed`, without a prior):
exact counts, mean and sum of squares carried in two words, merged across
devices with an ``axis_name``, ragged domains in any order.
"""

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.stats import running as rs


class DomainStatistics(struct.PyTreeNode):
    """The running statistics of each domain's rewards: ``(num_domains,)``, or ``()`` shared."""

    stats: rs.RunningStats


def init(num_domains: int | None, dtype=None) -> DomainStatistics:
    """No reward seen: every domain's mean and standard deviation NaN until its first."""
    shape = () if num_domains is None else (num_domains,)
    return DomainStatistics(stats=rs.init_stats(shape, dtype, prior_count=0.0))


def update(state: DomainStatistics, rewards, domains, axis_name) -> DomainStatistics:
    """The statistics with the finite ``rewards`` merged, each into its domain's."""
    stats = state.stats
    rewards = rewards.astype(stats.mean.dtype)
    valid = jnp.isfinite(rewards)
    if domains is None:
        merged = rs.merge_checked(stats, rewards, valid, axis_name=axis_name)
    else:
        merged = rs.merge_keyed(stats, rewards, valid, domains, axis_name=axis_name)
    return DomainStatistics(stats=merged)


def read(
    state: DomainStatistics, domains, ddof: int, first_std: float, dtype
) -> tuple[jax.Array, ...]:
    """Each answer's domain mean (two words) and standard deviation, in ``dtype``.

    With ``ddof`` delta degrees of freedom; a domain of ``ddof`` rewards or
    fewer (but one at least) has the standard deviation ``first_std`` (the
    convention's: NaN, or ROLL's inf, whose prior of count :math:`10^{-24}`
    and variance 1 makes ``var * n / (n - 1)`` of one reward a positive
    number over 0); one of none, NaN.
    """
    stats = state.stats
    count = stats.sample_count
    squares = stats.m2 + stats.m2_low
    enough = count > ddof
    variance = jnp.where(enough, squares / jnp.where(enough, count - ddof, 1), jnp.nan)
    std = jnp.where(enough | (count == 0), jnp.sqrt(variance), first_std)
    values = (stats.mean, stats.mean_low, std)
    if domains is None:
        return tuple(v.astype(dtype) for v in values)
    return tuple(rs.per_key(v, domains).astype(dtype) for v in values)
