"""A Jumanji wrapper that normalizes ``timestep.observation`` by its running statistics."""

import dataclasses
from typing import Any

import jax
from jumanji.types import TimeStep
from jumanji.wrappers import Wrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src import observation_wrapper as ow


class NormalizeObservation(Wrapper):
    r"""Normalizes ``timestep.observation`` by the running mean and variance of each feature.

    :func:`rewardnorm_jax.normalize_observation` (the formula and the presets)
    as a Jumanji wrapper. A Jumanji observation is a pytree (a ``NamedTuple``
    of arrays): every floating leaf is normalized by statistics of its own,
    and integer and boolean leaves (a grid of ids, an ``action_mask``, a step
    count) pass unchanged. Place it around the auto-resetting batch,
    ``NormalizeObservation(VmapAutoResetWrapper(env))``, for one set of
    statistics shared by the batch and kept across episodes.

    ``reset(key, stats_from=None, update_stats=True)`` continues from learned
    statistics and may freeze them (evaluation); ``step(state, action,
    update_stats=True)`` freezes them for one step. The state is an
    ``ObservationWrapperState`` (inner state in ``env_state``), read through
    any stack by :func:`get_observation_state`.

    Example:
      >>> import jumanji
      >>> from jumanji.wrappers import VmapAutoResetWrapper
      >>> from rewardnorm_jax.jumanji import NormalizeObservation
      >>> env = NormalizeObservation(VmapAutoResetWrapper(jumanji.make("Snake-v1")))
      >>> state, timestep = env.reset(jax.random.split(jax.random.PRNGKey(0), 4))
      >>> timestep.observation.grid.shape, timestep.observation.action_mask.dtype
      ((4, 12, 12, 5), dtype('bool'))

    Change logs:
      * Unreleased - Initially added.
    """

    def __init__(
        self,
        env,
        preset: str = "gymnasium",
        *,
        axis_name: Any = None,
        per_env: bool = False,
        **options,
    ):
        """Wraps ``env``; ``preset`` and ``options`` are ``normalize_observation``'s."""
        super().__init__(env)
        self.normalizer = rn.normalize_observation(preset, axis_name=axis_name, **options)
        self.per_env = per_env

    def reset(
        self,
        key: jax.Array,
        stats_from: rn.ObservationNormState | None = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[ow.ObservationWrapperState, TimeStep]:
        """Resets the environment; the statistics start fresh or from ``stats_from``."""
        env_state, timestep = self._env.reset(key)
        obs, state = ow.start(
            self.normalizer,
            timestep.observation,
            env_state,
            key,
            stats_from,
            ow.check_flag(update_stats),
            wrapper=type(self).__name__,
            per_env=self.per_env,
        )
        return state, dataclasses.replace(timestep, observation=obs)

    def step(
        self,
        state: ow.ObservationWrapperState,
        action: jax.Array,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[ow.ObservationWrapperState, TimeStep]:
        """Steps the environment and normalizes its observation."""
        env_state, timestep = self._env.step(state.env_state, action)
        obs, state = ow.advance(
            self.normalizer, state, timestep.observation, env_state, ow.check_flag(update_stats)
        )
        return state, dataclasses.replace(timestep, observation=obs)
