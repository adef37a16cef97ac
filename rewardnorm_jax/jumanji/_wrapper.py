r"""A Jumanji wrapper that passes ``timestep.reward`` through a core reward transform."""

import dataclasses

import jax
import jax.numpy as jnp
from jumanji.types import TimeStep
from jumanji.wrappers import Wrapper

from rewardnorm_jax._src.core import adapter
from rewardnorm_jax._src.core.adapter import RAW_REWARD, RewardWrapperState
from rewardnorm_jax._src.reward import NormalizeRewardWrapper


class RewardTransformWrapper(adapter.TransformWrapper, Wrapper):
    r"""Passes ``timestep.reward`` of a Jumanji environment through a reward transform.

    Each step calls the transform's ``step`` once; the episode ends come from
    the time step: a ``LAST`` step with discount 0 is a termination, a
    ``LAST`` step with discount > 0 a truncation (Jumanji's time limits):

    .. math::
      (\tilde r, s') = \mathrm{transform.step}(s, r,\;
      \mathrm{last} \wedge \gamma_t = 0,\; \mathrm{last} \wedge \gamma_t > 0,\;
      \mathrm{update\_stats})

    ``timestep.reward`` becomes the transformed reward (a float in the
    statistics' dtype for a normalizer, from the reset on, whatever the raw
    dtype) and the raw reward stays in ``timestep.extras["raw_reward"]``. The
    state is a :class:`~rewardnorm_jax.jumanji.RewardWrapperState` (inner state
    in ``env_state``, the transform state, a freeze flag), read and written by
    :func:`get_transform_state`, :func:`set_transform_state`,
    :func:`with_stats_from` and :func:`set_update_stats`.

    Place it around the auto-resetting batch, ``NormalizeReward(
    VmapAutoResetWrapper(env))``: one set of statistics for the batch, kept
    across episodes. Inside ``AutoResetWrapper`` it would be reset with every
    episode; its state has no ``key``, so ``AutoResetWrapper`` refuses it.
    Reset for one environment (reward of shape ``()``) under Jumanji's
    ``VmapWrapper``, it needs ``axis_name`` or ``per_env=True`` (see
    :doc:`/suites/index`, "One set of statistics or one per environment").

    Example:
      >>> import jumanji
      >>> from jumanji.wrappers import VmapAutoResetWrapper
      >>> import rewardnorm_jax as rn
      >>> from rewardnorm_jax.jumanji import RewardTransformWrapper
      >>> env = VmapAutoResetWrapper(jumanji.make("Snake-v1"))
      >>> env = RewardTransformWrapper(env, rn.normalize_reward(0.99))
      >>> state, timestep = env.reset(jax.random.split(jax.random.PRNGKey(0), 4))
      >>> state, timestep = env.step(state, jnp.zeros(4, jnp.int32))
      >>> timestep.extras["raw_reward"].tolist()
      [0.0, 0.0, 0.0, 0.0]

    Change logs:
      * Unreleased - Initially added.
    """

    batched_example = (
        "{}(VmapAutoResetWrapper(env)); inside VmapAutoResetWrapper it would restart with "
        "every episode, so neither per_env=True nor an axis_name fits there"
    )
    known_layout = False  # a reward may hold one number per agent, and Jumanji does not say

    def reset(self, key: jax.Array) -> tuple[RewardWrapperState, TimeStep]:
        """Resets the environment and the transform state (batch shape: the reward's).

        Raises:
          ValueError: if the environment is one environment, the transform
            learns statistics and the wrapper has neither ``axis_name`` nor
            ``per_env=True``.
        """
        env_state, timestep = self._env.reset(key)
        transform_state = self.init_transform_state(jnp.shape(timestep.reward))
        state = RewardWrapperState(
            env_state=env_state, transform_state=transform_state, update_stats=jnp.array(True)
        )
        return state, dataclasses.replace(
            timestep,
            reward=self.reset_reward(transform_state, timestep.reward),
            extras={**timestep.extras, RAW_REWARD: timestep.reward},
        )

    def step(
        self, state: RewardWrapperState, action: jax.Array
    ) -> tuple[RewardWrapperState, TimeStep]:
        """Steps the environment and transforms its reward."""
        env_state, timestep = self._env.step(state.env_state, action)
        raw = timestep.reward
        # one end per environment, or per agent: each spreads over the rewards it ends
        last = adapter.align_flag("step_type", timestep.last(), raw)
        ended = adapter.align_flag("discount", jnp.asarray(timestep.discount) == 0, raw)
        reward, transform_state = self.step_reward(
            state.transform_state,
            raw,
            last & ended,
            last & ~ended,
            state.update_stats,
            env_state=state.env_state,
        )
        timestep = dataclasses.replace(
            timestep,
            reward=reward,
            extras={**timestep.extras, RAW_REWARD: raw},
        )
        return state.replace(env_state=env_state, transform_state=transform_state), timestep


class NormalizeReward(NormalizeRewardWrapper, RewardTransformWrapper):
    r"""Scales ``timestep.reward`` by the running standard deviation of the discounted return.

    :func:`rewardnorm_jax.normalize_reward` (which links to the formula) as a
    Jumanji wrapper; ``semantics`` says which episode ends reset the return
    (``"gymnasium"``, the default: terminations only; ``"purejaxrl"``: every
    ``LAST`` step). See
    :class:`RewardTransformWrapper` for placement, flags and state.

    Example:
      >>> import jumanji
      >>> from jumanji.wrappers import VmapAutoResetWrapper
      >>> from rewardnorm_jax.jumanji import NormalizeReward, get_transform_state
      >>> env = NormalizeReward(VmapAutoResetWrapper(jumanji.make("Snake-v1")), gamma=0.99)
      >>> state, _ = env.reset(jax.random.split(jax.random.PRNGKey(0), 4))
      >>> get_transform_state(state).ret.shape   # one set of statistics, 4 returns
      (4,)

    Change logs:
      * Unreleased - Initially added.
    """
