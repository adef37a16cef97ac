"""JaxMARL adapter (``import rewardnorm_jax.jaxmarl``).

API:

* ``RewardTransformWrapper(env, transform, *, axis_name=None, per_env=False, task_of=None)``:
  a JaxMARL wrapper passing every agent's reward through one
  :class:`~rewardnorm_jax.RewardTransform`: the rewards of ``env.agents`` are
  stacked along a trailing agent axis, so one state and one merge cover all
  agents. ``NormalizeReward(env, gamma=0.99, epsilon=1e-8, *,
  semantics="gymnasium", ..., per_env=False, **options)`` builds it on
  :func:`rewardnorm_jax.normalize_reward`: team statistics by default,
  ``statistics=rn.Statistics(components=1)`` for one set per agent.
* Episodes end at ``dones["__all__"]`` for every agent (a termination); the raw
  rewards stay in ``infos["raw_reward"]``, one per agent in ``env.agents`` order.
* Under IPPO's ``jax.vmap(env.reset)`` / ``jax.vmap(env.step)``, share one set of
  statistics with ``axis_name="envs"`` on the wrapper and on both maps.
* ``get_transform_state(state)``, ``set_transform_state(state, ts)``,
  ``with_stats_from(state, ts)``, ``set_update_stats(state, flag)``: the
  transform state and freeze flag of the wrapper state, also under
  JaxMARL's ``LogWrapper``.
* ``NormalizeObservation(env, preset="gymnasium", *, axis_name=None, per_env=False,
  **options)``: every agent's observation normalized by statistics of its own
  (:func:`rewardnorm_jax.normalize_observation`), shared across ``axis_name``;
  ``get_observation_state(state)``, ``set_observation_state(state, obs_state)``,
  ``set_observation_update_stats(state, flag)``.

Only this subpackage imports JaxMARL; the top-level package exports none of it.
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

with requires("jaxmarl", __name__):
    from rewardnorm_jax.jaxmarl._observation import NormalizeObservation
    from rewardnorm_jax.jaxmarl._wrapper import NormalizeReward, RewardTransformWrapper

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
