"""Reward transforms: a reward in, a reward out, with the state that learns its scale.

Normalization by the running statistics of the discounted return
(:mod:`~rewardnorm_jax._src.reward.normalize`), percentile scaling, centering,
the finite-reward check, the stateless transforms and :func:`chain`, replayed
samples, and the ``NormalizeReward`` base every adapter's wrapper extends.
"""

from rewardnorm_jax._src.reward.center import CenterRewardState, center_reward
from rewardnorm_jax._src.reward.finite_reward import CheckFiniteRewardState, check_finite_reward
from rewardnorm_jax._src.reward.normalize import NormalizeRewardState, normalize_reward
from rewardnorm_jax._src.reward.normalize_wrapper import NormalizeRewardWrapper
from rewardnorm_jax._src.reward.percentile import (
    PercentileScaleRewardState,
    PercentileState,
    init_percentiles,
    percentile_scale,
    percentile_scale_reward,
    update_percentiles,
)
from rewardnorm_jax._src.reward.replay import apply_sampled
from rewardnorm_jax._src.reward.transforms import chain, clip_reward, scale_reward, transform_reward

__all__ = [
    "CenterRewardState",
    "CheckFiniteRewardState",
    "NormalizeRewardState",
    "NormalizeRewardWrapper",
    "PercentileScaleRewardState",
    "PercentileState",
    "apply_sampled",
    "center_reward",
    "chain",
    "check_finite_reward",
    "clip_reward",
    "init_percentiles",
    "normalize_reward",
    "percentile_scale",
    "percentile_scale_reward",
    "scale_reward",
    "transform_reward",
    "update_percentiles",
]
