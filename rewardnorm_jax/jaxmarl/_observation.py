"""A JaxMARL wrapper that normalizes every agent's observation by running statistics."""

from typing import Any

import jax
from jaxmarl.wrappers.baselines import JaxMARLWrapper

from rewardnorm_jax._src import observation as ow


class NormalizeObservation(ow.ObservationWrapper, JaxMARLWrapper):
    r"""Normalizes a JaxMARL ``MultiAgentEnv``'s observations, each agent by its own statistics.

    :func:`rewardnorm_jax.normalize_observation` (the formula and the presets)
    as a JaxMARL wrapper. The observations of one step are a dict keyed by
    agent name, a pytree: every agent's observation keeps statistics of its
    own (agents of one kind see the same features, agents of two kinds need
    not). JaxMARL steps one environment and batches with ``jax.vmap``, so the
    statistics are shared across the batch by an axis name given to the
    wrapper and to both maps, as for the reward wrappers.

    ``reset(key, stats_from=None, update_stats=True)`` continues from learned
    statistics and may freeze them (evaluation); ``step(key, state, actions,
    update_stats=True)`` freezes them for one step.

    Without ``axis_name``, ``statistics=rn.Statistics(per_env=True)`` keeps
    one set per environment of the ``jax.vmap``;
    ``statistics=rn.Statistics(num_tasks=K)`` with ``task_of=lambda
    env_state: ...`` (the environment's task id) keeps one per task, merged
    across the axis (:doc:`/observations`).

    Example:
      >>> import jaxmarl
      >>> from rewardnorm_jax.jaxmarl import NormalizeObservation
      >>> env = NormalizeObservation(jaxmarl.make("MPE_simple_spread_v3"), axis_name="envs")
      >>> keys = jax.random.split(jax.random.PRNGKey(0), 4)
      >>> obs, state = jax.vmap(env.reset, axis_name="envs")(keys)
      >>> obs["agent_0"].shape, state.obs_state.stats["agent_0"].mean.shape
      ((4, 18), (4, 18))

    Change logs:
      * Unreleased - Initially added.
    """

    def step(
        self,
        key: jax.Array,
        state: ow.ObservationWrapperState,
        actions: dict[str, Any],
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[Any, ...]:
        """Steps the environment and normalizes every agent's observation."""
        return self._step_result(state, self._env.step(key, state.env_state, actions), update_stats)
