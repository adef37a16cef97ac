r"""A JaxMARL wrapper that passes every agent's reward through one core reward transform."""

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jaxmarl.wrappers.baselines import JaxMARLWrapper

from rewardnorm_jax._src.core import adapter
from rewardnorm_jax._src.core.adapter import RAW_REWARD, RewardWrapperState
from rewardnorm_jax._src.reward import NormalizeRewardWrapper

EPISODE_END = "__all__"  # the key of JaxMARL's dones that ends every agent's episode


class RewardTransformWrapper(adapter.TransformWrapper, JaxMARLWrapper):
    r"""Passes the rewards of a JaxMARL ``MultiAgentEnv`` through a reward transform.

    The rewards of one step, a dict keyed by agent name, are stacked along a
    trailing agent axis in ``env.agents`` order, so one transform state and
    one statistics merge cover every agent. Each step calls the transform's
    ``step`` once:

    .. math::
      r_t = (r_t^{a_1}, \dots, r_t^{a_A}), \qquad
      (\tilde r_t, s') = \mathrm{transform.step}(s, r_t,\;
      \mathrm{dones}[\texttt{"\_\_all\_\_"}],\; 0,\; \mathrm{update\_stats})

    Who shares statistics is the transform's ``components``: ``0`` (the
    default of :func:`~rewardnorm_jax.normalize_reward`) keeps one set for the
    whole team, which keeps the ratios between agents' rewards; ``1`` keeps one
    set per agent.

    Episode ends: ``dones["__all__"]`` ends the return of every agent, as a
    termination (JaxMARL reports no time limits apart). It is the end at
    which ``MultiAgentEnv.step`` resets the environment and every agent
    starts again. An agent's own ``dones[agent]`` before it (a unit that died
    in SMAX) is not an end of its return: it stays true on every later step
    of the episode, so as an end it would restart the return at each of them.

    ``step`` returns the rewards as the same dict, transformed (agents' keys
    only; any other key is passed through), and keeps the raw rewards in
    ``infos["raw_reward"]``, of shape ``(A,)`` per environment in
    ``env.agents`` order, as JaxMARL's ``LogWrapper`` keeps its per-agent
    values. Place JaxMARL's ``LogWrapper`` or ``MPELogWrapper`` inside, as in
    ``NormalizeReward(LogWrapper(env))``, so its logged returns stay in
    environment units; outside, it logs the transformed rewards.

    The state is a :class:`~rewardnorm_jax.jaxmarl.RewardWrapperState` (inner
    state in ``env_state``, the transform state, a freeze flag), read and
    written by :func:`get_transform_state`, :func:`set_transform_state`,
    :func:`with_stats_from` and :func:`set_update_stats`, also through a
    ``LogWrapper`` outside.

    JaxMARL steps one environment and batches with ``jax.vmap``, as its IPPO
    baselines do. The wrapper reset with one environment's key needs
    ``axis_name`` or ``per_env=True`` (see :doc:`/suites/index`, "One set of
    statistics or one per environment"): with ``axis_name="envs"`` on the
    wrapper and the transform, and ``jax.vmap(env.reset, axis_name="envs")``
    and ``jax.vmap(env.step, axis_name="envs")``, every environment holds the
    same statistics, merged across the batch at each step. Around an
    environment whose ``reset`` takes one key per environment, one set is
    shared by the batch without either.

    Example:
      >>> import jaxmarl
      >>> import rewardnorm_jax as rn
      >>> from rewardnorm_jax.jaxmarl import RewardTransformWrapper
      >>> env = jaxmarl.make("MPE_simple_spread_v3")
      >>> per_agent = rn.Statistics(components=1)
      >>> transform = rn.normalize_reward(0.99, statistics=per_agent, axis_name="envs")
      >>> env = RewardTransformWrapper(env, transform, axis_name="envs")
      >>> keys = jax.random.split(jax.random.PRNGKey(0), 4)
      >>> obs, state = jax.vmap(env.reset, axis_name="envs")(keys)
      >>> actions = {agent: jnp.zeros(4, jnp.int32) for agent in env.agents}
      >>> step = jax.vmap(env.step, axis_name="envs")
      >>> obs, state, rewards, dones, infos = step(keys, state, actions)
      >>> infos["raw_reward"].shape, rewards["agent_0"].shape   # 4 environments, 3 agents
      ((4, 3), (4,))
      >>> rn.count_as_int(state.transform_state.stats)[0].tolist()   # 4 returns per agent
      [4, 4, 4]

    Change logs:
      * Unreleased - Initially added.
    """

    batched_example = "{}(env) around an environment whose reset takes one key per environment"
    component_axes = 1  # the agents, stacked along the rewards' last axis

    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key: jax.Array) -> tuple[Any, RewardWrapperState]:
        """Resets the environment and the transform state, one return per agent.

        Raises:
          ValueError: if ``key`` is one environment's, the transform learns
            statistics and the wrapper has neither ``axis_name`` nor
            ``per_env=True``; or ``axis_name`` is bound by no enclosing map.
        """
        obs, env_state = self._env.reset(key)
        batch_shape = jnp.shape(jax.random.key_data(key))[:-1]  # typed or raw keys
        transform_state = self.init_transform_state(batch_shape, (len(self._env.agents),))
        return obs, RewardWrapperState(
            env_state=env_state, transform_state=transform_state, update_stats=jnp.array(True)
        )

    @partial(jax.jit, static_argnums=(0,))
    def step(
        self, key: jax.Array, state: RewardWrapperState, actions: dict[str, Any]
    ) -> tuple[Any, RewardWrapperState, dict[str, jax.Array], dict[str, jax.Array], dict]:
        """Steps the environment and transforms every agent's reward.

        Returns:
          ``(obs, state, rewards, dones, infos)``: JaxMARL's step, with the
          rewards transformed and the raw ones in ``infos["raw_reward"]``.
        """
        obs, env_state, rewards, dones, infos = self._env.step(key, state.env_state, actions)
        agents = self._env.agents
        raw = jnp.stack([rewards[agent] for agent in agents], axis=-1)
        ended = dones[EPISODE_END]
        reward, transform_state = self.step_reward(
            state.transform_state,
            raw,
            ended,
            jnp.zeros_like(ended),
            state.update_stats,
            env_state=state.env_state,
        )
        rewards = {**rewards, **{agent: reward[..., i] for i, agent in enumerate(agents)}}
        state = state.replace(env_state=env_state, transform_state=transform_state)
        return obs, state, rewards, dones, {**infos, RAW_REWARD: raw}


class NormalizeReward(NormalizeRewardWrapper, RewardTransformWrapper):
    r"""Scales every agent's reward by the running standard deviation of its discounted return.

    :func:`rewardnorm_jax.normalize_reward` (which links to the formula) as a
    JaxMARL wrapper. Statistics are the team's by default (one set for every
    agent, keeping the ratios between their rewards, which suits one critic
    shared by all agents, as in JaxMARL's IPPO and MAPPO); ``Statistics(components=1)``
    keeps one set per agent, for agents whose reward scales differ (predators
    and prey in ``MPE_simple_tag_v3``) or that learn apart. Every agent's
    return restarts at ``dones["__all__"]``. See
    :class:`RewardTransformWrapper` for placement, ``infos`` and state.

    Example:
      >>> import jaxmarl
      >>> from jaxmarl.wrappers.baselines import MPELogWrapper
      >>> import rewardnorm_jax as rn
      >>> from rewardnorm_jax.jaxmarl import NormalizeReward, get_transform_state
      >>> env = jaxmarl.make("MPE_simple_spread_v3")
      >>> per_agent = rn.Statistics(components=1)
      >>> env = NormalizeReward(MPELogWrapper(env), statistics=per_agent, axis_name="envs")
      >>> keys = jax.random.split(jax.random.PRNGKey(0), 8)
      >>> obs, state = jax.vmap(env.reset, axis_name="envs")(keys)
      >>> get_transform_state(state).ret.shape   # 8 environments, 3 agents
      (8, 3)

    Change logs:
      * Unreleased - Initially added.
    """
