"""The types every transform shares: its configuration, its functions, its state's fields.

The library is built in three layers:

* **types** (this module): :class:`Config`, :class:`RewardTransform`, the
  protocols of its functions, :func:`per_env_field`, with which a state
  declares its per-environment data, and :func:`task_keyword`;
* **the machinery** around them (:mod:`rewardnorm_jax._src.core`), which walks
  any transform and names none: :mod:`~rewardnorm_jax._src.core.checks` (every
  check of an option or input), :mod:`~rewardnorm_jax._src.core.builder` (the
  checked ``init`` / ``update`` / ``apply`` / ``step`` every transform gets),
  :mod:`~rewardnorm_jax._src.core.state_fields` (what a state declares),
  :mod:`~rewardnorm_jax._src.core.checkpoint` and
  :mod:`~rewardnorm_jax._src.core.adapter`;
* **statistics** (:mod:`rewardnorm_jax._src.stats`), and **one package per
  family** (:mod:`~rewardnorm_jax._src.reward`, :mod:`~rewardnorm_jax._src.value`,
  :mod:`~rewardnorm_jax._src.llm`, :mod:`~rewardnorm_jax._src.observation`), each
  module a frozen configuration, a state, and module-level functions of
  (configuration, state, inputs) holding the math.

The contributors' page "Adding a transform" walks through one such module.
"""

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, Self

import jax
import numpy as np
from flax import struct

PyTree = Any
Shape = tuple[int, ...]
ShapeLike = int | np.integer | Sequence[int]
"""A ``batch_shape`` argument: a size ``n`` (meaning ``(n,)``) or a sequence of sizes."""
Real = float | np.floating | np.integer | np.ndarray | jax.Array
"""A hyperparameter: a Python or NumPy number, or a concrete 0-d array."""
TaskIds = jax.typing.ArrayLike | Sequence[int]
"""The ``task`` input of a keyed transform: integer ids, an array or a sequence of ints."""
PER_ENV = "per_env"
"""The field metadata key with which a state marks per-environment data (:func:`per_env_field`)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """A transform's configuration: its name and options, each checked when it is built.

    Every factory builds one frozen subclass, whose ``__post_init__`` checks
    (and normalizes) every option, so a built transform holds only valid
    options. Frozen and hashable, so a transform stays usable as a static
    argument of ``jax.jit``. ``str(config)`` reads as the factory's call with
    every option (``normalize_reward(gamma=0.99, ...)``), for messages.
    """

    name: ClassVar[str] = "transform"

    def __str__(self) -> str:
        options = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)]
        return f"{self.name}({', '.join(options)})"

    @classmethod
    def checked(cls, *options: Any, **named: Any) -> "Self":
        """The configuration of these options (``__post_init__`` checks and converts them).

        NumPy scalars (``np.int64(4)``, ``np.bool_(True)``) are held as the
        Python numbers they are, so that the configuration is plain metadata.
        """
        return cls(
            *(_plain(option) for option in options),
            **{name: _plain(option) for name, option in named.items()},
        )

    def metadata(self) -> dict[str, Any]:
        """The configuration as a flat ``{path: plain value}``, for checkpoints.

        Nested dataclasses (a :class:`~rewardnorm_jax.Semantics`, a
        :class:`~rewardnorm_jax.Statistics`) are flattened under their field's
        name (``"semantics/clip"``), and tuples (``group_advantages``'
        ``reward_weights``) as their length and entries
        (``"reward_weights/length"``, ``"reward_weights/0"``); fields marked
        ``metadata={"checkpoint": False}`` (an ``axis_name``, which says where
        a run executes, not what it learns) are left out.
        """
        found: dict[str, Any] = {"transform": self.name}
        for field in dataclasses.fields(self):
            if field.metadata.get("checkpoint", True):
                found.update(_flat(field.name, getattr(self, field.name)))
        return found


def _flat(path: str, value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            found.update(_flat(f"{path}/{field.name}", getattr(value, field.name)))
        return found
    if isinstance(value, np.dtype):
        return {path: value.name}
    if isinstance(value, tuple):
        found = {f"{path}/length": len(value)}
        for position, entry in enumerate(value):
            found.update(_flat(f"{path}/{position}", entry))
        return found
    return {path: _plain(value)}


def _plain(value: Any) -> Any:
    """A NumPy scalar as its Python number; anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


class InitFn(Hashable, Protocol):
    """Signature of :attr:`RewardTransform.init`; hashable, as it keys a cache of state layouts."""

    def __call__(self, batch_shape: ShapeLike = ()) -> PyTree:
        """The initial state for rewards of shape ``batch_shape``."""
        ...


class UpdateFn(Protocol):
    """Signature of :attr:`RewardTransform.update`."""

    def __call__(
        self,
        state: PyTree,
        reward: jax.typing.ArrayLike,
        terminated: jax.typing.ArrayLike = False,
        truncated: jax.typing.ArrayLike = False,
        *,
        active: jax.typing.ArrayLike | None = None,
        task: TaskIds | None = None,
    ) -> PyTree:
        """The state advanced by one environment step."""
        ...


class ApplyFn(Protocol):
    """Signature of :attr:`RewardTransform.apply`."""

    def __call__(
        self, state: PyTree, reward: jax.typing.ArrayLike, *, task: TaskIds | None = None
    ) -> jax.Array:
        """``reward`` transformed with the current state, which is left unchanged."""
        ...


class StepFn(Protocol):
    """Signature of :attr:`RewardTransform.step`."""

    def __call__(
        self,
        state: PyTree,
        reward: jax.typing.ArrayLike,
        terminated: jax.typing.ArrayLike = False,
        truncated: jax.typing.ArrayLike = False,
        update_stats: jax.typing.ArrayLike = True,
        *,
        active: jax.typing.ArrayLike | None = None,
        task: TaskIds | None = None,
    ) -> tuple[jax.Array, PyTree]:
        """``update`` then ``apply``: the transformed reward and the new state."""
        ...


class RewardTransform(NamedTuple):
    """A reward transform: a named set of pure functions over a state pytree.

    Attributes:
      init: ``init(batch_shape=()) -> state``. ``batch_shape`` is the shape of
        the reward arrays the transform will see (``()`` for one environment,
        ``(num_envs,)`` for a batch).
      update: ``update(state, reward, terminated, truncated, *, active=None,
        task=None) -> state``: advance the state by one environment step.
      apply: ``apply(state, reward, *, task=None) -> reward``: transform
        rewards with the current state, learning nothing (``clip_reward``'s
        clips, ``normalize_reward``'s divides by the current scale).
      step: ``step(state, reward, terminated, truncated, update_stats=True, *,
        active=None, task=None) -> (reward, state)``: ``update`` then
        ``apply``, in one call. ``update_stats=False`` (a Python or traced
        boolean) freezes the learned statistics while rewards are still
        transformed.
      config: the transform's :class:`Config` (its name and options). Its
        ``metadata()`` is what :func:`~rewardnorm_jax.save_state` and
        :func:`~rewardnorm_jax.load_state` take, so a checkpoint of another
        configuration is refused by name.
      num_tasks: ``None``, or the number :math:`K` of tasks of a keyed
        transform (one set of statistics per task): its ``update``,
        ``apply`` and ``step`` then need ``task``, each environment's id
        in ``[0, K)``, on every call.
      components: how many trailing axes of a reward are components of one
        environment's reward (objectives, agents) with statistics of their
        own; 0 where every axis is an environment.
      per_env: whether every statistic the transform keeps belongs to one
        environment (true for the stateless transforms too), so that a
        wrapper serving one environment under an unnamed ``jax.vmap`` keeps
        exactly what the transform means to keep.
      unchecked: :class:`Unchecked`, its ``apply`` and ``step`` without the
        input checks (``None`` for a transform written by hand).

    ``terminated`` and ``truncated`` are booleans of the reward's shape (or
    scalars); ``active`` marks the environments that took part in this step
    (``False`` on Gymnasium's autoreset steps), default all. Integer and float
    flags count as true where nonzero (Brax's ``done`` is a float array).
    ``task`` holds the integer task ids of this call's environments, an input
    like the reward (a transform without ``num_tasks`` refuses one).
    Every function raises a TypeError at trace time for a flag that is not a
    number (``"False"`` would otherwise be true) and for rewards that are not
    real numbers (complex ones would lose their imaginary part).
    """

    init: InitFn
    update: UpdateFn
    apply: ApplyFn
    step: StepFn
    config: Config
    num_tasks: int | None = None
    components: int = 0
    per_env: bool = True
    unchecked: "Unchecked | None" = None


class StepInputs(NamedTuple):
    """The inputs of one step, checked: kinds, shapes against the state, task ids in range.

    The flags are as the caller gave them (a Python bool stays one, so the
    compiled step carries only the masks it needs); ``task`` holds int32 ids
    (``-1`` for an id out of range under ``jit``) of the environments' shape
    or a leading part of it, or ``None`` for a transform without tasks.
    """

    reward: jax.typing.ArrayLike
    terminated: jax.typing.ArrayLike
    truncated: jax.typing.ArrayLike
    update_stats: jax.typing.ArrayLike
    active: jax.typing.ArrayLike | None
    task: jax.Array | None


class Unchecked(NamedTuple):
    """A transform's ``apply`` and ``step`` on inputs already checked, for composition.

    :func:`~rewardnorm_jax.chain` checks its inputs once and runs its
    members' unchecked functions.
    """

    apply: Callable[[PyTree, jax.typing.ArrayLike, "jax.Array | None"], jax.Array]
    step: Callable[[PyTree, StepInputs], tuple[jax.Array, PyTree]]


def per_env_field(**kwargs: Any) -> Any:
    """A state field of per-environment data: the batch's shape, not shared.

    A tracked return is one. The generic pieces read the declaration: the
    checked functions take the batch shape from such a field, an adapter's
    :func:`~rewardnorm_jax.brax.with_stats_from` keeps them (statistics from
    a run of another batch size), and a state whose only leaves are such
    fields learns no statistics.
    """
    return struct.field(pytree_node=True, metadata={PER_ENV: True}, **kwargs)


class EmptyState(struct.PyTreeNode):
    """State of a stateless transform."""


def task_keyword(transform: RewardTransform, task) -> dict:
    """``{"task": task}`` for a keyed transform, ``{}`` for any other: the keyword to call it with.

    Transforms written without ``task`` may not take the keyword, so an
    unkeyed transform is called without it.
    """
    return {} if transform.num_tasks is None else {"task": task}
