"""Jumanji adapter (``import rewardnorm_jax.jumanji``).

API:

* ``RewardTransformWrapper(env, transform, *, axis_name=None, per_env=False, task_of=None)``:
  a ``jumanji.wrappers.Wrapper`` passing ``timestep.reward`` through any
  :class:`~rewardnorm_jax.RewardTransform`; a ``LAST`` step with discount 0
  is a termination, with discount > 0 a truncation; the raw reward stays in
  ``timestep.extras["raw_reward"]``. ``NormalizeReward(env, gamma=0.99,
  epsilon=1e-8, *, semantics="gymnasium", ..., per_env=False, **options)``
  builds it on :func:`rewardnorm_jax.normalize_reward`.
* Place it around the auto-resetting batch:
  ``NormalizeReward(VmapAutoResetWrapper(env))``.
* ``get_transform_state(state)``, ``set_transform_state(state, ts)``,
  ``with_stats_from(state, ts)``, ``set_update_stats(state, flag)``: the
  transform state and freeze flag of the wrapper state.
* ``NormalizeObservation(env, preset="gymnasium", *, axis_name=None, per_env=False,
  **options)``: ``timestep.observation`` normalized by
  :func:`rewardnorm_jax.normalize_observation`, around the auto-resetting batch;
  ``get_observation_state(state)``, ``set_observation_state(state, obs_state)``,
  ``set_observation_update_stats(state, flag)``.

Only this subpackage imports Jumanji; the top-level package exports none of it.
"""

from rewardnorm_jax._src.core.adapter import (
    RewardWrapperState,
    get_transform_state,
    set_transform_state,
    set_update_stats,
    with_stats_from,
)
from rewardnorm_jax._src.core.extras import requires
from rewardnorm_jax._src.observation import (
    ObservationWrapperState,
    get_observation_state,
    set_observation_state,
    set_observation_update_stats,
)

with requires("jumanji", __name__):
    from rewardnorm_jax.jumanji._observation import NormalizeObservation
    from rewardnorm_jax.jumanji._wrapper import NormalizeReward, RewardTransformWrapper

__all__ = [
    "NormalizeObservation",
    "NormalizeReward",
    "ObservationWrapperState",
    "RewardTransformWrapper",
    "RewardWrapperState",
    "get_observation_state",
    "get_transform_state",
    "set_observation_state",
    "set_observation_update_stats",
    "set_transform_state",
    "set_update_stats",
    "with_stats_from",
]
