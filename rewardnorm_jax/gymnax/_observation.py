"""A gymnax wrapper that normalizes observations by their running statistics."""

from functools import partial
from typing import Any

import jax
from gymnax.wrappers.purerl import GymnaxWrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src import observation as ow

PyTree = Any


class NormalizeObservation(ow.ObservationWrapper, GymnaxWrapper):
    r"""Normalizes every observation by the running mean and variance of each feature.

    :func:`rewardnorm_jax.normalize_observation` around a gymnax environment
    (which gives the formula and the presets): the counterpart of PureJaxRL's
    ``NormalizeVecObservation`` and Gymnasium's ``NormalizeObservation``. Put
    it around the batch (:class:`VecEnv`, PureJaxRL's ``VecEnv``), so one set
    of statistics serves every environment, or per environment under a
    ``jax.vmap`` named ``axis_name``. Observations may be any pytree; integer
    leaves pass unchanged.

    ``reset(key, params=None, stats_from=None, update_stats=True)`` and
    ``step(key, state, action, params=None, update_stats=True)`` keep the
    wrapped environment's return values (six or five), with normalized
    observations; both update the statistics first (the presets'
    ``"brax"`` normalizes first). ``stats_from`` continues from learned
    statistics (evaluation, PureJaxRL loses them at every reset);
    ``update_stats=False`` at reset freezes them for the episode.
    :func:`get_observation_state` reads them for a checkpoint or an export.

    ``statistics=rn.Statistics(per_env=True)`` keeps one set per environment
    of the batch, and ``statistics=rn.Statistics(num_tasks=K)`` with
    ``task_of=lambda env_state: ...`` (each environment's task id) one per
    task (:doc:`/observations`).

    Example:
      >>> import gymnax
      >>> from rewardnorm_jax.gymnax import NormalizeObservation, VecEnv
      >>> env, params = gymnax.make("Pendulum-v1")
      >>> env = NormalizeObservation(VecEnv(env), "purejaxrl")
      >>> obs, state = env.reset(jax.random.split(jax.random.key(0), 8), params)
      >>> obs.shape, int(rn.count_as_int(state.obs_state.stats)[0])
      ((8, 3), 8)

    Change logs:
      * v0.1.0 - Initially added.
    """

    # gymnax's reset takes the environment's params after the key.
    def reset(  # type: ignore[override]
        self,
        key: jax.Array,
        params: Any = None,
        stats_from: rn.ObservationNormState | None = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[PyTree, ow.ObservationWrapperState]:
        """Resets the environment; the statistics start fresh or from ``stats_from``.

        Args:
          key: reset key; one per environment for a batched environment.
          params: environment parameters.
          stats_from: observation statistics to continue from
            (``get_observation_state(state)``), or ``None`` for fresh ones.
          update_stats: scalar flag; ``False`` freezes the statistics for
            every step of this state (evaluation).
        """
        return self._reset(key, params, stats_from, ow.check_flag(update_stats))

    @partial(jax.jit, static_argnames=("self",))
    def _reset(self, key, params, stats_from, update_stats):
        return self._reset_result(self._env.reset(key, params), key, stats_from, update_stats)

    def step(
        self,
        key: jax.Array,
        state: ow.ObservationWrapperState,
        action: Any,
        params: Any = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[Any, ...]:
        """Steps the environment and normalizes its observations.

        ``update_stats=False`` (scalar, may be traced) freezes the statistics
        for this step, as does the state's own flag.
        """
        return self._step(key, state, action, params, ow.check_flag(update_stats))

    @partial(jax.jit, static_argnames=("self",))
    def _step(self, key, state, action, params, update_stats):
        result = self._env.step(key, state.env_state, action, params)
        return self._step_result(state, result, update_stats)
