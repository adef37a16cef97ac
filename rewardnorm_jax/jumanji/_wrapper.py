r"""A Jumanji wrapper that passes ``timestep.reward`` through a core reward transform."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jumanji.env import Environment
from jumanji.types import TimeStep
from jumanji.wrappers import Wrapper

import rewardnorm_jax as rn
from rewardnorm_jax._src import wrapper_state as _state

_SEMANTICS_DEFAULT = _state.SEMANTICS_DEFAULT
RAW_REWARD = "raw_reward"  # timestep.extras key: the reward before the transform


class RewardTransformWrapper(Wrapper):
    r"""Passes ``timestep.reward`` of a Jumanji environment through a reward transform.

    Each step calls the transform's ``step`` once; the episode ends come from
    the time step: a ``LAST`` step with discount 0 is a termination, a
    ``LAST`` step with discount > 0 a truncation (Jumanji's time limits):

    .. math::
      (\tilde r, s') = \mathrm{transform.step}(s, r,\;
      \mathrm{last} \wedge \gamma_t = 0,\; \mathrm{last} \wedge \gamma_t > 0,\;
      \mathrm{update\_stats})

    ``timestep.reward`` becomes the transformed reward (in the raw reward's
    dtype) and the raw reward stays in ``timestep.extras["raw_reward"]``. The
    state is a :class:`~rewardnorm_jax.jumanji.RewardWrapperState` (inner state
    in ``env_state``, the transform state, a freeze flag), read and written by
    :func:`get_transform_state`, :func:`set_transform_state`,
    :func:`with_stats_from` and :func:`set_update_stats`.

    Place it around the auto-resetting batch, ``NormalizeReward(
    VmapAutoResetWrapper(env))``: one set of statistics for the batch, kept
    across episodes. Inside ``AutoResetWrapper`` it would be reset with every
    episode; its state has no ``key``, so ``AutoResetWrapper`` refuses it.
    Reset for one environment (reward of shape ``()``), a wrapper whose
    transform learns statistics needs ``axis_name`` or ``per_env=True``:
    under Jumanji's ``VmapWrapper`` (an unnamed ``jax.vmap``) each environment
    would otherwise silently keep its own.

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
      * v0.2.0 - Initially added.
    """

    def __init__(
        self,
        env: Environment,
        transform: rn.RewardTransform,
        *,
        axis_name: Any = None,
        per_env: bool = False,
    ):
        """Wraps ``env``.

        Args:
          env: a Jumanji environment or wrapper, batched or not.
          transform: the reward transform applied to every reward.
          axis_name: for a wrapper serving one environment under
            ``jax.vmap(..., axis_name=...)``: the axis name the transform was
            built with, across which it shares its statistics.
          per_env: for a wrapper serving one environment: keep statistics of
            that environment alone (one set per environment under Jumanji's
            ``VmapWrapper``).

        Raises:
          ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`.
        """
        super().__init__(env)
        self.transform = _state.check_transform(transform)
        self._axis_name = axis_name
        self._per_env = bool(per_env)

    def reset(self, key: jax.Array) -> tuple[_state.RewardWrapperState, TimeStep]:
        """Resets the environment and the transform state (batch shape: the reward's).

        Raises:
          ValueError: if the environment is one environment, the transform
            learns statistics and the wrapper has neither ``axis_name`` nor
            ``per_env=True``.
        """
        env_state, timestep = self._env.reset(key)
        batch_shape = tuple(jnp.shape(timestep.reward))
        transform_state = _state.init_transform_state(
            type(self).__name__, self.transform, batch_shape, self._axis_name, self._per_env
        )
        state = _state.RewardWrapperState(
            env_state=env_state, transform_state=transform_state, update_stats=jnp.array(True)
        )
        return state, dataclasses.replace(
            timestep, extras={**timestep.extras, RAW_REWARD: timestep.reward}
        )

    def step(
        self, state: _state.RewardWrapperState, action: jax.Array
    ) -> tuple[_state.RewardWrapperState, TimeStep]:
        """Steps the environment and transforms its reward."""
        env_state, timestep = self._env.step(state.env_state, action)
        raw, last = timestep.reward, timestep.last()
        # per-agent rewards and discounts (multi-agent environments) share their step's end
        last = jnp.reshape(last, jnp.shape(last) + (1,) * (jnp.ndim(raw) - jnp.ndim(last)))
        ended = jnp.asarray(timestep.discount) == 0
        reward, transform_state = self.transform.step(
            state.transform_state, raw, last & ended, last & ~ended, state.update_stats
        )
        timestep = dataclasses.replace(
            timestep,
            reward=reward.astype(jnp.result_type(raw)),
            extras={**timestep.extras, RAW_REWARD: raw},
        )
        return state.replace(env_state=env_state, transform_state=transform_state), timestep


class NormalizeReward(RewardTransformWrapper):
    r"""Scales ``timestep.reward`` by the running standard deviation of the discounted return.

    :func:`rewardnorm_jax.normalize_reward` as a Jumanji wrapper:

    .. math::
      G \leftarrow \gamma\, G\, (1 - d) + r, \qquad
      \tilde r = r / \sqrt{\sigma^2_G + \epsilon}

    with the flag :math:`d` chosen by ``semantics`` (``"gymnasium"``, the
    default: terminations only; ``"purejaxrl"``: every ``LAST`` step). See
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
      * v0.2.0 - Initially added.
    """

    def __init__(
        self,
        env: Environment,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        *,
        semantics: "str | rn.Semantics" = "gymnasium",
        clip: Any = _SEMANTICS_DEFAULT,
        dtype=None,
        axis_name=None,
        per_env: bool = False,
        **options,
    ):
        """Wraps ``env``; arguments as :func:`rewardnorm_jax.normalize_reward`'s.

        ``per_env`` (or ``shared=False``): for a wrapper serving one
        environment without ``axis_name``, keep statistics of that environment
        alone.

        Raises:
          ValueError: for an invalid hyperparameter (see
            :func:`rewardnorm_jax.normalize_reward`).
        """
        transform, per_env = _state.normalize_transform(
            gamma, epsilon, semantics, clip, dtype, axis_name, per_env, options
        )
        super().__init__(env, transform, axis_name=axis_name, per_env=per_env)
