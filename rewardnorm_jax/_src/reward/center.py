r"""Reward centering: rewards minus their running mean (Naik et al., 2024).

In continuing tasks the discounted values carry a large constant,
:math:`\bar r / (1 - \gamma)`, that every value estimate must learn and that
grows as :math:`\gamma \to 1`. Subtracting the running mean of the rewards
removes it. This module is the library's smallest transform with statistics;
the contributors' page "Adding a transform" walks through it.
"""

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.core import base, builder, checks
from rewardnorm_jax._src.stats import running as rs
from rewardnorm_jax._src.stats.placement import SHARED, Statistics


class CenterRewardState(struct.PyTreeNode):
    """State of :func:`center_reward`: the rewards' running statistics."""

    stats: rs.RunningStats  # of the shape Statistics.shape gives


@dataclasses.dataclass(frozen=True)
class CenterRewardConfig(base.Config):
    """The options of :func:`center_reward`, checked when it is built."""

    name: ClassVar[str] = "center_reward"
    statistics: Statistics = SHARED
    dtype: Any = None
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})

    def __post_init__(self):
        if not isinstance(self.statistics, Statistics):
            raise TypeError(
                f"statistics should be a rewardnorm_jax.Statistics, got {self.statistics!r}."
            )
        dtype = rs.check_dtype(self.dtype)
        rs.check_decay(self.statistics.decay, dtype)  # a decay that rounds to 1 never forgets
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "axis_name", rs.check_axis_name(self.axis_name))


def init(config: CenterRewardConfig, batch_shape: base.Shape) -> CenterRewardState:
    """The prior: mean 0, of weight :data:`~rewardnorm_jax.PRIOR_COUNT`."""
    shape = config.statistics.shape(batch_shape)
    return CenterRewardState(
        stats=rs.init_stats(shape, config.dtype, decay=config.statistics.decay)
    )


def apply(config: CenterRewardConfig, state: CenterRewardState, reward, task) -> jax.Array:
    """The rewards minus the running mean of their statistics (NaN and inf pass as they are).

    The mean is subtracted as its two words, ``(reward - mean) - mean_low``: the
    first difference is exact where the reward is near the mean.
    """
    reward = jnp.asarray(reward, config.dtype)
    task = config.statistics.env_task(task, reward.shape)
    stats = state.stats
    return (reward - rs.per_key(stats.mean, task)) - rs.per_key(stats.mean_low, task)


def step(config: CenterRewardConfig, state: CenterRewardState, inputs: base.StepInputs):
    """Learn the finite, active rewards (unless frozen), then center them."""
    reward = jnp.asarray(inputs.reward, config.dtype)
    task = config.statistics.env_task(inputs.task, reward.shape)
    learn = jnp.isfinite(reward)
    if inputs.active is not None:
        learn = learn & checks.as_flag(inputs.active, reward.shape, "active")
    if inputs.update_stats is not True:
        learn = learn & jnp.asarray(inputs.update_stats, bool)
    if task is None:
        stats = rs.merge_checked(state.stats, reward, learn, axis_name=config.axis_name)
    else:
        stats = rs.merge_keyed(state.stats, reward, learn, task, axis_name=config.axis_name)
    new_state = CenterRewardState(stats=stats)
    return apply(config, new_state, reward, inputs.task), new_state


def center_reward(
    *, statistics: Statistics = SHARED, dtype=None, axis_name=None
) -> base.RewardTransform:
    r"""Subtracts the running mean of the rewards: :math:`\tilde r = r - \bar r`.

    Each step merges the step's finite rewards into the running statistics
    (:func:`~rewardnorm_jax.merge_stats`: shared by the batch by default),
    then subtracts their mean, so the centered reward of the first step is
    :math:`r - \bar r` with :math:`\bar r` that step's own mean (and the
    prior's weight :math:`10^{-4}`). Non-finite rewards are left out of the
    statistics and pass through; ``update_stats=False`` freezes the mean;
    episode ends change nothing (the mean is of rewards, not of returns).

    Args:
      statistics: where the mean lives and how it weighs the past, a
        :class:`~rewardnorm_jax.Statistics`: ``decay`` gives the exponential
        moving mean of simple reward centering (Naik et al. use a step size
        :math:`\beta`, here ``decay = 1 - \beta`` with bias correction), and
        ``num_tasks`` one mean per task.
      dtype: statistics dtype, float32 or float64; default float64 under x64.
      axis_name: mapped axis name(s) to share the statistics across.

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform` with state :class:`CenterRewardState`.

    Raises:
      ValueError: for a ``decay`` that rounds to 1 in ``dtype``.
      TypeError: for ``statistics`` that is no :class:`~rewardnorm_jax.Statistics`.

    Example:
      >>> center = center_reward()
      >>> state = center.update(center.init((2,)), jnp.array([1.0, 3.0]))
      >>> center.apply(state, jnp.array([1.0, 3.0])).round(3).tolist()
      [-1.0, 1.0]

    References:
      Naik, Wan, Tomar and Sutton, `Reward Centering
      <https://arxiv.org/abs/2405.09999>`_, RLC 2024.
    """
    config = CenterRewardConfig.checked(statistics, dtype, axis_name)
    return builder.make_transform(config, init, apply, step, **config.statistics.transform_fields())
