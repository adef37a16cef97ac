"""The reward-transform interface shared by every transform and adapter."""

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from flax.core import FrozenDict

PyTree = Any
Shape = tuple[int, ...]


class InitFn(Protocol):
    def __call__(self, batch_shape: Shape = ()) -> PyTree: ...


class UpdateFn(Protocol):
    def __call__(
        self,
        state: PyTree,
        reward: jax.typing.ArrayLike,
        terminated: jax.typing.ArrayLike = False,
        truncated: jax.typing.ArrayLike = False,
        *,
        active: jax.typing.ArrayLike | None = None,
    ) -> PyTree: ...


class NormalizeFn(Protocol):
    def __call__(self, state: PyTree, reward: jax.typing.ArrayLike) -> jax.Array: ...


class StepFn(Protocol):
    def __call__(
        self,
        state: PyTree,
        reward: jax.typing.ArrayLike,
        terminated: jax.typing.ArrayLike = False,
        truncated: jax.typing.ArrayLike = False,
        update_stats: jax.typing.ArrayLike = True,
        *,
        active: jax.typing.ArrayLike | None = None,
    ) -> tuple[jax.Array, PyTree]: ...


Config = FrozenDict
"""A transform's configuration: a read-only, hashable mapping of plain values.

Hashable so that a :class:`RewardTransform` stays usable as a static argument
of ``jax.jit``.
"""


class RewardTransform(NamedTuple):
    """A reward transform: a named set of pure functions over a state pytree.

    Attributes:
      init: ``init(batch_shape=()) -> state``. ``batch_shape`` is the shape of
        the reward arrays the transform will see (``()`` for one environment,
        ``(num_envs,)`` for a batch).
      update: ``update(state, reward, terminated, truncated, *, active=None)
        -> state``: advance the state by one environment step.
      normalize: ``normalize(state, reward) -> reward``: transform rewards with
        the current state, changing nothing.
      step: ``step(state, reward, terminated, truncated, update_stats=True, *,
        active=None) -> (reward, state)``: ``update`` then ``normalize``, in one
        call. ``update_stats=False`` (a Python or traced boolean) freezes the
        learned statistics while rewards are still transformed.
      config: the transform's name and hyperparameters as a flat mapping of
        plain values (``{"transform": "normalize_reward", "gamma": 0.99,
        "semantics": "gymnasium", ...}``; a chain prefixes its members' keys
        with their position, ``"0/transform"``). Pass it as the metadata of
        :func:`~rewardnorm_jax.save_state` and :func:`~rewardnorm_jax.load_state`
        so a checkpoint of another configuration is refused by name.

    ``terminated`` and ``truncated`` are booleans of the reward's shape (or
    scalars); ``active`` marks the environments that took part in this step
    (``False`` on Gymnasium's autoreset steps), default all.
    """

    init: InitFn
    update: UpdateFn
    normalize: NormalizeFn
    step: StepFn
    config: Config = FrozenDict()


def make_config(name: str, **hyperparameters) -> Config:
    """A transform's ``config``: its name, then its hyperparameters."""
    return Config({"transform": name, **hyperparameters})


@struct.dataclass
class EmptyState:
    """State of a stateless transform."""


def stateless(
    fn: Callable[[jax.Array], jax.Array], config: Config = FrozenDict()
) -> RewardTransform:
    """Wraps an elementwise reward function as a :class:`RewardTransform`."""

    def init(batch_shape: Shape = ()) -> EmptyState:
        del batch_shape
        return EmptyState()

    def update(state, reward, terminated=False, truncated=False, *, active=None):
        del reward, terminated, truncated, active
        return state

    def normalize(state, reward):
        del state
        return fn(jnp.asarray(reward))

    def step(state, reward, terminated=False, truncated=False, update_stats=True, *, active=None):
        del terminated, truncated, update_stats, active
        return fn(jnp.asarray(reward)), state

    return RewardTransform(init, update, normalize, step, config)


def check_step_shapes(batch_shape: Shape, reward, **flags) -> None:
    """Raises a ValueError at trace time if shapes disagree with the state.

    ``reward`` must have exactly ``batch_shape``; each flag may be a scalar
    (broadcast to the batch) or have exactly ``batch_shape``. Silent
    broadcasting would give wrong statistics, so nothing else is accepted.
    """
    if jnp.shape(reward) != tuple(batch_shape):
        raise ValueError(
            f"reward has shape {jnp.shape(reward)} but the state was initialised "
            f"with batch_shape={tuple(batch_shape)}; pass rewards of that shape "
            "or re-create the state with init(batch_shape=reward.shape)."
        )
    for name, value in flags.items():
        if value is not None and jnp.shape(value) not in ((), tuple(batch_shape)):
            raise ValueError(
                f"{name} has shape {jnp.shape(value)}; expected a scalar or the "
                f"state's batch_shape {tuple(batch_shape)}."
            )


def as_flag(value, batch_shape: Shape) -> jax.Array:
    """A boolean array of ``batch_shape`` from a scalar or array flag."""
    return jnp.broadcast_to(jnp.asarray(value, dtype=bool), batch_shape)


def is_real(value) -> bool:
    """Whether a hyperparameter is a real number, not a bool.

    Python and NumPy scalars qualify, and so do concrete 0-d NumPy or JAX
    arrays of an integer or floating dtype (``jnp.float32(0.99)``).

    Raises:
      TypeError: for a traced value: hyperparameters configure the compiled
        computation, so a transform is built outside ``jit``.
    """
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"hyperparameters must be concrete numbers, got the traced value {value}; "
            "build the transform outside jit (its hyperparameters are static)."
        )
    if isinstance(value, (np.ndarray, jax.Array)):
        return value.shape == () and (
            jnp.issubdtype(value.dtype, jnp.integer) or jnp.issubdtype(value.dtype, jnp.floating)
        )
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
