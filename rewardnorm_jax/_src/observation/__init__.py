"""Observation normalization: each feature by its running mean and variance.

:mod:`~rewardnorm_jax._src.observation.normalizer` holds the normalizer (with
the presets of Gymnasium, PureJaxRL, SB3 and Brax);
:mod:`~rewardnorm_jax._src.observation.wrapper` what every suite's
``NormalizeObservation`` shares.
"""

from rewardnorm_jax._src.observation.normalizer import (
    ObservationConfig,
    ObservationNormalizer,
    ObservationNormState,
    normalize_observation,
    std,
)
from rewardnorm_jax._src.observation.wrapper import (
    ObservationWrapper,
    ObservationWrapperState,
    check_flag,
    get_observation_state,
    set_observation_state,
    set_observation_update_stats,
)

__all__ = [
    "ObservationConfig",
    "ObservationNormState",
    "ObservationNormalizer",
    "ObservationWrapper",
    "ObservationWrapperState",
    "check_flag",
    "get_observation_state",
    "normalize_observation",
    "set_observation_state",
    "set_observation_update_stats",
    "std",
]
