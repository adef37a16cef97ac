"""rewardnorm_jax: functional reward transforms for reinforcement learning in JAX.

Reward normalization (running statistics of the discounted return), clipping,
scaling and arbitrary transforms, and observation normalization, as pure ``init`` /
``update`` / ``apply`` / ``step`` functions over immutable state pytrees, PopArt for
value targets, and group-relative advantages (GRPO and kin), masked whitening, the KL penalty
in the reward, the overlong penalty and the aggregation of per-token losses for RL on
language models.
Everything works under ``jax.jit``, ``jax.vmap`` and ``lax.scan``.

The public API is what this module exports; ``rewardnorm_jax._src`` is not API.
Adapters, each an extra that alone imports its framework:
``rewardnorm_jax.gymnax`` (and Craftax), ``rewardnorm_jax.gymnasium``,
``rewardnorm_jax.brax`` (and MuJoCo Playground), ``rewardnorm_jax.jumanji``,
``rewardnorm_jax.jaxmarl`` and ``rewardnorm_jax.tunix``.
"""

from rewardnorm_jax._src.core.base import EmptyState, RewardTransform
from rewardnorm_jax._src.core.checkpoint import load_state, save_state
from rewardnorm_jax._src.core.semantics import Semantics
from rewardnorm_jax._src.llm import (
    GroupAdvantageEstimator,
    GroupAdvantages,
    aggregate_loss,
    aggregation_count,
    group_advantages,
    kl_estimate,
    kl_penalized_rewards,
    masked_whiten,
    overlong_penalty,
)
from rewardnorm_jax._src.observation import (
    ObservationNormalizer,
    ObservationNormState,
    normalize_observation,
)
from rewardnorm_jax._src.reward import (
    CenterRewardState,
    CheckFiniteRewardState,
    NormalizeRewardState,
    PercentileScaleRewardState,
    PercentileState,
    apply_sampled,
    center_reward,
    chain,
    check_finite_reward,
    clip_reward,
    init_percentiles,
    normalize_reward,
    percentile_scale,
    percentile_scale_reward,
    scale_reward,
    transform_reward,
    update_percentiles,
)
from rewardnorm_jax._src.stats.placement import Statistics
from rewardnorm_jax._src.stats.running import (
    PRIOR_COUNT,
    RunningStats,
    count_as_int,
    init_stats,
    merge_stats,
)
from rewardnorm_jax._src.value import (
    PopArt,
    PopArtState,
    ScaledSupport,
    ScaledSupportState,
    Support,
    categorical_cross_entropy,
    categorical_projection,
    decode_logits,
    decode_probs,
    hl_gauss,
    popart,
    preserve_outputs,
    scaled_support,
    signed_hyperbolic,
    signed_hyperbolic_reward,
    signed_parabolic,
    support,
    symexp,
    symlog,
    symlog_reward,
    symlog_support,
    two_hot,
    uniform_support,
)

__version__ = "0.1.0"

__all__ = [
    "PRIOR_COUNT",
    "CenterRewardState",
    "CheckFiniteRewardState",
    "EmptyState",
    "GroupAdvantageEstimator",
    "GroupAdvantages",
    "NormalizeRewardState",
    "ObservationNormState",
    "ObservationNormalizer",
    "PercentileScaleRewardState",
    "PercentileState",
    "PopArt",
    "PopArtState",
    "RewardTransform",
    "RunningStats",
    "ScaledSupport",
    "ScaledSupportState",
    "Semantics",
    "Statistics",
    "Support",
    "aggregate_loss",
    "aggregation_count",
    "apply_sampled",
    "categorical_cross_entropy",
    "categorical_projection",
    "center_reward",
    "chain",
    "check_finite_reward",
    "clip_reward",
    "count_as_int",
    "decode_logits",
    "decode_probs",
    "group_advantages",
    "hl_gauss",
    "init_percentiles",
    "init_stats",
    "kl_estimate",
    "kl_penalized_rewards",
    "load_state",
    "masked_whiten",
    "merge_stats",
    "normalize_observation",
    "normalize_reward",
    "overlong_penalty",
    "percentile_scale",
    "percentile_scale_reward",
    "popart",
    "preserve_outputs",
    "save_state",
    "scale_reward",
    "scaled_support",
    "signed_hyperbolic",
    "signed_hyperbolic_reward",
    "signed_parabolic",
    "support",
    "symexp",
    "symlog",
    "symlog_reward",
    "symlog_support",
    "transform_reward",
    "two_hot",
    "uniform_support",
    "update_percentiles",
]
