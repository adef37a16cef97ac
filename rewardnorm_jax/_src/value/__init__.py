"""Value targets: what a critic learns from, at a scale it can fit.

The invertible squashing transforms (:func:`symlog`, the signed hyperbolic
transform, their reward transforms); PopArt, which normalizes value targets
and preserves the network's outputs when the statistics move; and categorical
targets: supports, the two-hot and HL-Gauss encoders, decoders, the C51
projection, the cross-entropy, and supports whose bounds follow the return
statistics.
"""

from rewardnorm_jax._src.value.categorical import (
    Support,
    categorical_cross_entropy,
    decode_logits,
    decode_probs,
    hl_gauss,
    support,
    symlog_support,
    two_hot,
    uniform_support,
)
from rewardnorm_jax._src.value.popart import PopArt, PopArtState, popart, preserve_outputs
from rewardnorm_jax._src.value.projection import categorical_projection
from rewardnorm_jax._src.value.scaled_support import (
    ScaledSupport,
    ScaledSupportState,
    scaled_support,
)
from rewardnorm_jax._src.value.transforms import (
    signed_hyperbolic,
    signed_hyperbolic_reward,
    signed_parabolic,
    symexp,
    symlog,
    symlog_reward,
)

__all__ = [
    "PopArt",
    "PopArtState",
    "ScaledSupport",
    "ScaledSupportState",
    "Support",
    "categorical_cross_entropy",
    "categorical_projection",
    "decode_logits",
    "decode_probs",
    "hl_gauss",
    "popart",
    "preserve_outputs",
    "scaled_support",
    "signed_hyperbolic",
    "signed_hyperbolic_reward",
    "signed_parabolic",
    "support",
    "symexp",
    "symlog",
    "symlog_reward",
    "symlog_support",
    "two_hot",
    "uniform_support",
]
