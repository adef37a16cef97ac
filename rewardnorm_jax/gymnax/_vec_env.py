"""A batch of gymnax environments stepped as one, under ``jax.vmap``."""

from functools import partial
from typing import Any

import jax
from gymnax.wrappers.purerl import GymnaxWrapper


class VecEnv(GymnaxWrapper):
    """Maps ``reset`` and ``step`` of a gymnax environment over a batch.

    As PureJaxRL's ``VecEnv``: ``reset(keys, params)`` takes one key per
    environment and ``step(keys, states, actions, params)`` batched keys,
    states and actions; ``params`` is shared. The batch size is the keys'.

    With ``axis_name``, the map is named, so a per-environment
    :class:`~rewardnorm_jax.gymnax.NormalizeReward` built with the same
    ``axis_name`` shares its statistics across the batch.

    Example:
      >>> import gymnax
      >>> from rewardnorm_jax.gymnax import VecEnv
      >>> env, params = gymnax.make("CartPole-v1")
      >>> keys = jax.random.split(jax.random.key(0), 8)
      >>> obs, states = VecEnv(env).reset(keys, params)
      >>> obs.shape
      (8, 4)

    Change logs:
      * v0.1.0 - Initially added.
    """

    def __init__(self, env, axis_name: Any = None):
        """Wraps ``env``; ``axis_name`` names the mapped axis (default unnamed)."""
        super().__init__(env)
        self.axis_name = axis_name

    @partial(jax.jit, static_argnames=("self",))
    def reset(self, key: jax.Array, params: Any = None):
        """Resets every environment: ``key`` holds one key per environment.

        Raises:
          ValueError: for a single key (the batch size is the keys').
        """
        check_batched_keys("reset", key)
        return jax.vmap(self._env.reset, in_axes=(0, None), axis_name=self.axis_name)(key, params)

    @partial(jax.jit, static_argnames=("self",))
    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None):
        """Steps every environment with batched keys, states and actions.

        Raises:
          ValueError: for a single key.
        """
        check_batched_keys("step", key)
        return jax.vmap(self._env.step, in_axes=(0, 0, 0, None), axis_name=self.axis_name)(
            key, state, action, params
        )


def check_batched_keys(method: str, key: jax.Array) -> None:
    """Refuses a single key where :class:`VecEnv` needs one per environment.

    Typed keys (``jax.random.key``) have the batch's shape; raw ``uint32``
    keys (``jax.random.PRNGKey``) carry the key data on a trailing axis.

    Raises:
      ValueError: naming the method, the key's shape and the call that splits it.
    """
    if jax.random.key_data(key).ndim < 2:
        raise ValueError(
            f"VecEnv.{method} takes one key per environment (the batch size is the keys'), "
            f"got a single key of shape {jax.numpy.shape(key)}: split it, e.g. "
            f"VecEnv(env).{method}(jax.random.split(key, num_envs), ...)."
        )
