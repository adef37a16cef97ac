"""Value targets: what a critic learns from, at a scale it can fit.

The invertible squashing transforms (:func:`symlog`, the signed hyperbolic
transform, their reward transforms) and PopArt, which normalizes value targets
and preserves the network's outputs when the statistics move.
"""

from rewardnorm_jax._src.value.popart import PopArt, PopArtState, popart, preserve_outputs
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
    "popart",
    "preserve_outputs",
    "signed_hyperbolic",
    "signed_hyperbolic_reward",
    "signed_parabolic",
    "symexp",
    "symlog",
    "symlog_reward",
]
