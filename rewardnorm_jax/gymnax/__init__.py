"""gymnax adapter: reward transforms as gymnax wrappers (``import rewardnorm_jax.gymnax``).

API:

* ``RewardTransformWrapper(env, transform, *, axis_name=None, per_env=False, task_of=None)``: any
  :class:`~rewardnorm_jax.RewardTransform` (including ``chain(...)``) applied
  to every reward. Named wrappers built on it:
  ``NormalizeReward(env, gamma=0.99, epsilon=1e-8, *, semantics="gymnasium",
  statistics=Statistics(), dtype=None, axis_name=None, g_max=None,
  finite_rewards=False, per_env=False, task_of=None)`` (the options of
  ``rewardnorm_jax.normalize_reward``),
  ``TransformReward(env, fn)``, ``ClipReward(env, low=-1.0, high=1.0)``.
* ``wrapper.reset(key, params=None, stats_from=None) -> (obs, state)`` and
  ``wrapper.step(key, state, action, params=None, update_stats=True) ->
  (obs, state, reward, terminated, truncated, info)``, or ``(obs, state,
  reward, done, info)`` around a five-value step (``LegacyStepAPIWrapper``,
  PureJaxRL's wrappers, Craftax: an end with ``info["discount"] == 0`` is a
  termination, any other a truncation), both jitted with a
  static ``self``. ``stats_from``: a transform state to continue from; its
  tracked returns (``ret``) restart, everything else (statistics) is kept.
  ``update_stats``: scalar, possibly traced,
  boolean; ``False`` freezes the statistics.
* ``RewardWrapperState(env_state, transform_state, update_stats)``: the
  wrapper state (a ``flax.struct`` dataclass).
* ``get_transform_state(state)``, ``set_transform_state(state, transform_state)``,
  ``with_stats_from(state, transform_state)``, ``set_update_stats(state, flag)``:
  read / write the outermost
  ``RewardWrapperState`` inside any wrapper stack (following ``env_state``).
* ``VecEnv(env, axis_name=None)``: ``jax.vmap`` of ``reset(keys, params)`` /
  ``step(keys, states, actions, params)`` over one key per environment.
* ``NormalizeObservation(env, preset="gymnasium", *, axis_name=None, **options)``:
  observations normalized by :func:`rewardnorm_jax.normalize_observation`
  (PureJaxRL's ``NormalizeVecObservation`` is ``preset="purejaxrl"``);
  ``reset(key, params=None, stats_from=None, update_stats=True)``;
  ``get_observation_state(state)``, ``set_observation_state(state, obs_state)``,
  ``set_observation_update_stats(state, flag)`` through any wrapper stack.

Shared statistics over a batch of N environments, two ways:

* ``NormalizeReward(VecEnv(env))``: reset with N keys; rewards are ``(N,)``
  and the transform state is ``init(batch_shape=(N,))``.
* ``VecEnv(NormalizeReward(env, axis_name="envs"), axis_name="envs")`` (or
  your own ``jax.vmap(..., axis_name="envs")``): one wrapper per environment,
  statistics merged across the named axis; every copy holds the same values.

A wrapper reset with one environment's key needs ``axis_name`` or
``per_env=True``.

Only this subpackage imports gymnax; the top-level package exports none of it.
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

with requires("gymnax", __name__):
    from rewardnorm_jax.gymnax._observation import NormalizeObservation
    from rewardnorm_jax.gymnax._vec_env import VecEnv
    from rewardnorm_jax.gymnax._wrapper import (
        ClipReward,
        NormalizeReward,
        RewardTransformWrapper,
        TransformReward,
    )

__all__ = [
    "ClipReward",
    "NormalizeObservation",
    "NormalizeReward",
    "ObservationWrapperState",
    "RewardTransformWrapper",
    "RewardWrapperState",
    "TransformReward",
    "VecEnv",
    "get_observation_state",
    "get_transform_state",
    "set_observation_state",
    "set_observation_update_stats",
    "set_transform_state",
    "set_update_stats",
    "with_stats_from",
]
