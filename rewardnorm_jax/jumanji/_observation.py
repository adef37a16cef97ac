"""A Jumanji wrapper that normalizes ``timestep.observation`` by its running statistics."""

import dataclasses
from typing import Any

import jax
from jumanji.types import TimeStep
from jumanji.wrappers import Wrapper

from rewardnorm_jax._src import observation as ow


class NormalizeObservation(ow.ObservationWrapper, Wrapper):
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

    ``statistics=rn.Statistics(per_env=True)`` keeps one set per environment
    of the batch, and ``statistics=rn.Statistics(num_tasks=K)`` with
    ``task_of=lambda env_state: ...`` (each environment's task id) one per
    task (:doc:`/observations`).

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

    @staticmethod
    def _unpack(result: tuple[Any, TimeStep]) -> tuple[Any, Any]:
        """Jumanji's ``(state, timestep)``: the observation is ``timestep.observation``."""
        env_state, timestep = result
        return timestep.observation, env_state

    @staticmethod
    def _repack(result, observations, state) -> tuple[ow.ObservationWrapperState, TimeStep]:
        """``(state, timestep)`` with the normalized observation in the time step."""
        return state, dataclasses.replace(result[1], observation=observations)

    def step(
        self,
        state: ow.ObservationWrapperState,
        action: jax.Array,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[ow.ObservationWrapperState, TimeStep]:
        """Steps the environment and normalizes its observation."""
        return self._step_result(state, self._env.step(state.env_state, action), update_stats)
