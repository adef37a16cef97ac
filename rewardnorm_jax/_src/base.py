"""The reward-transform interface shared by every transform and adapter."""

import dataclasses
import functools
import math
import numbers
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from flax.core import FrozenDict
from jax.experimental import checkify

PyTree = Any
Shape = tuple[int, ...]
ShapeLike = int | np.integer | Sequence[int]
"""A ``batch_shape`` argument: a size ``n`` (meaning ``(n,)``) or a sequence of sizes."""
Real = float | np.floating | np.integer | np.ndarray | jax.Array
"""A hyperparameter: a Python or NumPy number, or a concrete 0-d array (see :func:`is_real`)."""
TaskIds = jax.typing.ArrayLike | Sequence[int]
"""The ``task`` input of a keyed transform: integer ids, an array or a sequence of ints."""


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


class NormalizeFn(Protocol):
    """Signature of :attr:`RewardTransform.normalize`."""

    def __call__(
        self,
        state: PyTree,
        reward: jax.typing.ArrayLike,
        *,
        task: TaskIds | None = None,
    ) -> jax.Array:
        """``reward`` transformed with the current state."""
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
        """``update`` then ``normalize``: the transformed reward and the new state."""
        ...


Config = FrozenDict
"""A transform's configuration: a read-only, hashable mapping of plain values.

Hashable so that a :class:`RewardTransform` stays usable as a static argument
of ``jax.jit``.
"""
NO_CONFIG: Config = FrozenDict()


class RewardTransform(NamedTuple):
    """A reward transform: a named set of pure functions over a state pytree.

    Attributes:
      init: ``init(batch_shape=()) -> state``. ``batch_shape`` is the shape of
        the reward arrays the transform will see (``()`` for one environment,
        ``(num_envs,)`` for a batch).
      update: ``update(state, reward, terminated, truncated, *, active=None,
        task=None) -> state``: advance the state by one environment step.
      normalize: ``normalize(state, reward, *, task=None) -> reward``:
        transform rewards with the current state, changing nothing.
      step: ``step(state, reward, terminated, truncated, update_stats=True, *,
        active=None, task=None) -> (reward, state)``: ``update`` then
        ``normalize``, in one call. ``update_stats=False`` (a Python or traced
        boolean) freezes the learned statistics while rewards are still
        transformed.
      config: the transform's name and hyperparameters as a flat mapping of
        plain values (``{"transform": "normalize_reward", "gamma": 0.99,
        "semantics": "gymnasium", ...}``; a chain prefixes its members' keys
        with their position, ``"0/transform"``). Pass it as the metadata of
        :func:`~rewardnorm_jax.save_state` and :func:`~rewardnorm_jax.load_state`
        so a checkpoint of another configuration is refused by name.
      num_tasks: ``None``, or the number :math:`K` of tasks of a keyed
        transform (one set of statistics per task): its ``update``,
        ``normalize`` and ``step`` then need ``task``, each environment's id
        in ``[0, K)``, on every call.
      components: how many trailing axes of a reward are components of one
        environment's reward (objectives, agents) with statistics of their
        own; 0 where every axis is an environment.

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
    normalize: NormalizeFn
    step: StepFn
    config: Config = NO_CONFIG
    num_tasks: int | None = None
    components: int = 0


def transform_from_step(
    init: InitFn,
    normalize: Callable,
    step: Callable,
    config: Config = NO_CONFIG,
    *,
    num_tasks: int | None = None,
    components: int = 0,
) -> RewardTransform:
    """A :class:`RewardTransform` whose ``update`` is ``step``'s new state.

    ``update(state, reward, terminated, truncated, *, active, task)`` is
    ``step(state, reward, terminated, truncated, active=active, task=task)[1]``:
    the statistics learn (``update_stats=True``) and the transformed reward is
    dropped. The stateful transforms and :func:`~rewardnorm_jax.chain` are
    built by it, so their ``update`` and ``step`` never disagree.

    A keyed transform (``num_tasks``) passes ``normalize`` and ``step`` that
    take ``task=``; any other passes them without it, and the transform's
    functions refuse a ``task`` (:func:`refuse_task`).
    """
    if num_tasks is None:
        normalize, step = _without_task(normalize, step, config)

    def update(state, reward, terminated=False, truncated=False, *, active=None, task=None):
        return step(state, reward, terminated, truncated, active=active, task=task)[1]

    return RewardTransform(init, update, normalize, step, config, num_tasks, components)


def _without_task(normalize: Callable, step: Callable, config: Config) -> tuple[Callable, Callable]:
    """``normalize`` and ``step`` taking ``task=None``, refusing any other."""

    def normalize_unkeyed(state, reward, *, task=None):
        refuse_task(task, config)
        return normalize(state, reward)

    def step_unkeyed(*args, task=None, **kwargs):
        refuse_task(task, config)
        return step(*args, **kwargs)

    return normalize_unkeyed, step_unkeyed


def task_keyword(transform: RewardTransform, task) -> dict[str, Any]:
    """``{"task": task}`` for a keyed transform, ``{}`` for any other: the keyword to call it with.

    Transforms built before ``task`` existed may not take the keyword, so an
    unkeyed transform is called without it.
    """
    return {} if transform.num_tasks is None else {"task": task}


def refuse_task(task, config: Config) -> None:
    """Raises a ValueError for task ids given to a transform that keeps no per-task statistics."""
    if task is not None:
        name = config.get("transform", "this transform")
        raise ValueError(
            f"task was given ({describe(task)}), but {name} keeps no per-task statistics "
            "(num_tasks=None), so the ids would be ignored: build it with num_tasks=K "
            "(e.g. rn.normalize_reward(0.99, num_tasks=K)), or leave task out."
        )


def make_config(name: str, **hyperparameters) -> Config:
    """A transform's ``config``: its name, then its hyperparameters."""
    return Config({"transform": name, **hyperparameters})


class EmptyState(struct.PyTreeNode):
    """State of a stateless transform."""


def stateless(fn: Callable[[jax.Array], jax.Array], config: Config = NO_CONFIG) -> RewardTransform:
    """Wraps an elementwise reward function as a :class:`RewardTransform`."""

    def init(batch_shape: ShapeLike = ()) -> EmptyState:
        check_batch_shape(batch_shape)
        return EmptyState()

    def update(state, reward, terminated=False, truncated=False, *, active=None, task=None):
        refuse_task(task, config)
        check_state(state, init, (), config)
        check_step_kinds(reward, terminated=terminated, truncated=truncated, active=active)
        return state

    def normalize(state, reward):
        check_state(state, init, (), config)
        reward = jnp.asarray(check_reward("reward", reward))
        out = fn(reward)
        if jnp.shape(out) != reward.shape:  # a reduction or broadcast would mix environments
            raise ValueError(
                f"{config.get('transform', 'the transform')} must map rewards elementwise, "
                f"but its function turns shape {reward.shape} into {jnp.shape(out)}."
            )
        return out

    def step(state, reward, terminated=False, truncated=False, update_stats=True, *, active=None):
        check_step_kinds(
            reward,
            terminated=terminated,
            truncated=truncated,
            update_stats=update_stats,
            active=active,
        )
        return normalize(state, reward), state

    return RewardTransform(init, update, *_without_task(normalize, step, config), config)


def check_batch_shape(batch_shape, name: str = "batch_shape") -> Shape:
    """``batch_shape`` as a tuple of sizes: an int ``n`` means ``(n,)``.

    The one rule for every ``init(batch_shape)`` and statistics shape.

    Raises:
      TypeError: if ``batch_shape`` is not an int or a sequence of ints.
      ValueError: if a size is negative.
    """
    sizes = (batch_shape,) if _is_size(batch_shape) else batch_shape
    if not (isinstance(sizes, (tuple, list)) and all(map(_is_size, sizes))):
        raise TypeError(
            f"{name} should be an int or a tuple of ints (the shape of the rewards), "
            f"got {name}={batch_shape!r}."
        )
    sizes = tuple(operator.index(size) for size in sizes)
    if any(size < 0 for size in sizes):
        raise ValueError(f"{name} should hold sizes >= 0, got {name}={batch_shape!r}.")
    return sizes


def shape_of(array) -> Shape:
    """The shape of an array, tracer or ``ShapeDtypeStruct``; ``()`` for anything else."""
    shape = getattr(array, "shape", ())
    return tuple(shape) if isinstance(shape, tuple) else ()


def _is_size(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def layout(tree, path: str = "") -> dict[str, str]:
    """``{path: description}`` of a state's static structure.

    Containers give their type, array leaves ``dtype[shape]`` (arrays, tracers
    and ``jax.ShapeDtypeStruct`` alike), ``None`` gives ``"None"`` and static
    dataclass fields (``RunningStats.decay``) their ``repr``.
    """
    name = path.rstrip("/") or "state"
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        found = {name: type(tree).__name__}
        for field in dataclasses.fields(tree):
            value = getattr(tree, field.name)
            if field.metadata.get("pytree_node", True):
                found.update(layout(value, f"{path}{field.name}/"))
            else:
                found[path + field.name] = repr(value)
        return found
    if isinstance(tree, (tuple, list, Mapping)):
        items = tree.items() if isinstance(tree, Mapping) else enumerate(tree)
        found = {name: f"{type(tree).__name__} of {len(tree)}"}
        for key, value in items:
            found.update(layout(value, f"{path}{key}/"))
        return found
    if hasattr(tree, "dtype") and hasattr(tree, "shape"):
        return {name: f"{np.dtype(tree.dtype).name}{list(tree.shape)}"}
    return {name: "None" if tree is None else type(tree).__name__}


@functools.lru_cache(maxsize=256)
def _expected_layout(init: InitFn, batch_shape: Shape) -> dict[str, str]:
    return layout(jax.eval_shape(lambda: init(batch_shape)))


def check_state(
    state,
    init: InitFn,
    batch_shape: Shape,
    config: Config,
    hints: Mapping[str, str] = NO_CONFIG,
) -> None:
    """Raises a ValueError at trace time if ``state`` is not one ``init`` makes.

    The state must have the structure, static fields, shapes and dtypes of
    ``init(batch_shape)``: a state built by the same factory with other
    hyperparameters (another ``decay``, ``g_max``, ``shared``, ``dtype``) or by
    another transform would otherwise run silently with the wrong arithmetic,
    or fail deep inside it.

    Args:
      state: the state passed to ``update`` / ``normalize`` / ``step``.
      init: the transform's ``init``.
      batch_shape: the batch shape the state claims (its return's shape).
      config: the transform's config, to name its hyperparameters.
      hints: ``{path prefix: "name,name"}``, the hyperparameters that set
        the parts of the state under that prefix (the longest matching
        prefix is named in the message; ``""`` matches every path).
    """
    expected = _expected_layout(init, batch_shape)
    found = layout(state)
    if found == expected:
        return
    lines = []
    paths = sorted(set(found) | set(expected))
    if found["state"] != expected["state"]:  # another transform's state: the type says it
        paths = ["state"]
    for path in paths:
        have, want = found.get(path, "absent"), expected.get(path, "absent")
        if have != want:
            prefixes = [prefix for prefix in hints if path.startswith(prefix)]
            names = hints[max(prefixes, key=len)].split(",") if prefixes else []
            setting = ", ".join(f"{name}={config.get(name)!r}" for name in names)
            lines.append(
                f"{path}: the state has {have}, this transform expects {want}"
                + (f" (this transform has {setting})" if setting else "")
            )
    raise ValueError(
        f"the state does not match this {config.get('transform', 'transform')}"
        + (f" for batch_shape={batch_shape}" if batch_shape else "")
        + ":\n  "
        + "\n  ".join(lines)
        + "\nCreate the state with this transform's init(batch_shape)."
    )


def check_step_shapes(batch_shape: Shape, reward, **flags) -> None:
    """Raises a ValueError at trace time if shapes disagree with the state.

    ``reward`` must have exactly ``batch_shape``; each flag may be a scalar
    (broadcast to the batch), have exactly ``batch_shape``, or a leading part
    of it: a flag of shape ``(N,)`` for rewards of shape ``(N, k)`` (``k``
    objectives or agents of one environment) applies to the environment's
    every reward. Silent broadcasting would give wrong statistics, so nothing
    else is accepted.
    """
    if jnp.shape(reward) != tuple(batch_shape):
        raise ValueError(
            f"reward has shape {jnp.shape(reward)} but the state was initialised "
            f"with batch_shape={tuple(batch_shape)}; pass rewards of that shape "
            "or re-create the state with init(batch_shape=reward.shape)."
        )
    for name, value in flags.items():
        if value is None:
            continue
        shape = jnp.shape(value)
        if shape != tuple(batch_shape)[: len(shape)]:
            raise ValueError(
                f"{name} has shape {shape}; expected a scalar, the state's batch_shape "
                f"{tuple(batch_shape)} or a leading part of it (one flag per environment "
                "for all of its rewards)."
            )


def check_step_kinds(reward, **flags) -> None:
    """Raises a TypeError at trace time unless ``reward`` is real and every flag a flag.

    :func:`check_reward` for ``reward``, :func:`check_flag` for every flag
    that is not ``None`` (``active=None`` means every environment).
    """
    check_reward("reward", reward)
    for name, value in flags.items():
        if value is not None:
            check_flag(name, value)


def check_step_inputs(batch_shape: Shape, reward, **flags) -> None:
    """:func:`check_step_kinds`, then :func:`check_step_shapes`: every check of a step's inputs."""
    check_step_kinds(reward, **flags)
    check_step_shapes(batch_shape, reward, **flags)


# Python scalars as the arrays they become (a Python int of any size is an integer).
_PYTHON_DTYPES = ((bool, np.bool_), (int, np.int64), (float, np.float64), (complex, np.complex128))


def _dtype_of(value):
    """The dtype ``value`` has as an array, without converting it; ``None`` if it has none.

    Arrays, tracers and NumPy scalars give their own dtype (JAX's extended
    dtypes, such as PRNG keys, included), Python scalars the matching NumPy
    dtype, and anything else the dtype NumPy (or, for a sequence of tracers,
    JAX) gives it. Strings and bytes give their string dtypes; ``None`` and
    objects no array holds give ``None`` or ``object``.
    """
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return dtype
    for kind, python_dtype in _PYTHON_DTYPES:
        if isinstance(value, kind):
            return np.dtype(python_dtype)
    if value is None:
        return None
    for convert in (np.asarray, jnp.asarray):
        try:
            return convert(value).dtype
        except Exception:  # noqa: BLE001  # any failure means: not an array of numbers
            continue
    return None


def _is_real_dtype(dtype) -> bool:
    """Whether ``dtype`` holds real numbers: bool, integer or floating (bfloat16 too)."""
    if dtype is None or (isinstance(dtype, np.dtype) and dtype.kind in "mM"):
        return False  # NumPy counts timedelta64 as an integer: a duration is no reward
    try:
        return any(jnp.issubdtype(dtype, kind) for kind in (jnp.bool_, jnp.integer, jnp.floating))
    except TypeError:  # a dtype JAX does not know (NumPy's datetime64, for one)
        return False


def describe(value) -> str:
    """``value`` for an error message: its repr, or for an array its dtype and shape."""
    dtype = _dtype_of(value)
    if isinstance(value, jax.core.Tracer):
        return f"a traced {dtype}{list(jnp.shape(value))} array"
    if isinstance(value, (np.ndarray, jax.Array)):
        article = "an" if str(dtype).startswith(("int", "object")) else "a"  # a uint8
        return f"{article} {dtype}{list(np.shape(value))} array"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} (of type {type(value).__name__}" + (f", dtype {dtype})" if dtype else ")")


def check_flag(name: str, value):
    """Returns ``value`` if it is a flag; raises a TypeError naming ``name`` otherwise.

    A flag is a Python or NumPy bool, or an array of bools (NumPy or JAX,
    traced too). Integer and floating numbers and arrays are flags too, true
    where nonzero, as environments return ``done`` (Brax's is a float array).
    Anything else is refused: ``jnp.asarray("False", bool)`` is ``True``, so a
    string would silently set the flag; complex numbers, ``None`` and other
    objects are refused too. The check reads the dtype only: under ``jit`` it costs
    nothing in the compiled step.

    Raises:
      TypeError: naming the parameter, its value and what a flag may be.

    Example:
      >>> check_flag("terminated", "False")  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      TypeError: terminated should be a boolean flag: ... Got terminated='False' (of type str, ...).
    """
    dtype = _dtype_of(value)
    if not _is_real_dtype(dtype):
        raise TypeError(
            f"{name} should be a boolean flag: a Python or NumPy bool, or an array of bools "
            "(NumPy or JAX, traced too); integer or floating 0/1 values (a float done) count "
            f"as true where nonzero. Got {name}={describe(value)}."
        )
    return value


def check_reward(name: str, value):
    """Returns ``value`` if it holds real numbers; raises a TypeError naming ``name`` otherwise.

    Rewards (and the values of the statistics functions and value transforms)
    may be Python or NumPy numbers or arrays of a bool, integer or floating
    dtype. Complex numbers are refused, since the cast to the statistics
    dtype would silently drop their imaginary part; so are strings, ``None``
    and other objects. The check reads the dtype only (no cost under ``jit``).

    Raises:
      TypeError: naming the parameter, its value and the valid dtypes.
    """
    dtype = _dtype_of(value)
    if not _is_real_dtype(dtype):
        hint = ""
        if dtype is not None and jnp.issubdtype(dtype, jnp.complexfloating):
            hint = " (pass jnp.real or jnp.abs of it: the imaginary part would be dropped)"
        raise TypeError(
            f"{name} should hold real numbers (a bool, integer or floating dtype), "
            f"got {name}={describe(value)}{hint}."
        )
    return value


def spread(value: jax.typing.ArrayLike, shape: Shape) -> jax.Array:
    """``value``, of a leading part of ``shape``, broadcast over the trailing axes it lacks.

    One value per environment, shape ``(N,)``, serves every reward of that
    environment when the rewards have shape ``(N, k)``: it is read as
    ``(N, 1)`` and broadcast to ``(N, k)``.
    """
    value = jnp.reshape(value, jnp.shape(value) + (1,) * (len(shape) - jnp.ndim(value)))
    return jnp.broadcast_to(value, shape)


def as_flag(value, batch_shape: Shape, name: str) -> jax.Array:
    """A boolean array of ``batch_shape`` from a flag of a leading part of its shape."""
    return spread(jnp.asarray(check_flag(name, value), dtype=bool), batch_shape)


def check_update_stats(update_stats):
    """``update_stats`` checked: a scalar flag, Python or traced (returned as it is).

    Raises:
      TypeError: for a flag that is not a number (:func:`check_flag`).
      ValueError: for a flag that is not a scalar.
    """
    check_flag("update_stats", update_stats)
    if jnp.shape(update_stats) != ():
        raise ValueError(
            f"update_stats has shape {jnp.shape(update_stats)}; it must be a scalar "
            "boolean (one flag for the shared statistics), Python or traced."
        )
    return update_stats


def check_task(
    task, shape: Shape, num_tasks: int, per: str, *, broadcast: bool = False, leading: bool = False
):
    """Task ids checked, as int32; ``-1`` for an id outside ``[0, K)`` under ``jit``.

    Args:
      task: integer ids, one per ``per`` (an environment, a target) of ``shape``;
        with ``broadcast``, any shape that broadcasts to it (``jnp.arange(K)``);
        with ``leading``, a leading part of it (one id for every trailing entry,
        as an episode end of an environment is the end of all its rewards).
      shape: the shape the ids must have.
      num_tasks: :math:`K`.
      per: what each id belongs to, for the messages.
      broadcast: whether a shape that broadcasts to ``shape`` fits.
      leading: whether a leading part of ``shape`` fits.

    Returns:
      The ids as int32, of ``task``'s own shape.

    Raises:
      TypeError: for ids that are not integers (floats, bools, NumPy's
        ``timedelta64``).
      ValueError: for ids of another shape, or (when their values are known,
        outside ``jit``) an id outside ``[0, K)``, named with its position.
        Traced ids outside ``[0, K)`` are a ``checkify`` error where the
        caller runs under ``jax.experimental.checkify.checkify``.

    Ids wider than 32 bits are checked at their full width, so no wide id
    wraps into range here. Under ``jit`` without x64, JAX itself converts an
    int64 argument to int32 before any library code sees it: an id of
    ``2**32 + 1`` arrives as 1 and runs task 1. Keep ids in int32 there (or
    enable ``jax_enable_x64``).
    """
    if isinstance(task, (list, tuple)) and len(task) == 0:
        task = np.zeros(0, np.int32)  # no ids: NumPy would give them float64
    dtype = _dtype_of(task)
    if not (_is_real_dtype(dtype) and jnp.issubdtype(dtype, jnp.integer) and dtype != np.bool_):
        raise TypeError(
            f"task should be integer ids in [0, {num_tasks}), one per {per}, got "
            f"task={describe(task)}."
        )
    if not isinstance(task, jax.Array):
        task = np.asarray(task)  # a list or tuple of ids
    fits = jnp.shape(task) == shape
    if leading and not fits:
        fits = jnp.shape(task) == shape[: jnp.ndim(task)]
    if broadcast and not fits:
        try:
            fits = np.broadcast_shapes(jnp.shape(task), shape) == shape
        except ValueError:
            fits = False
    if not fits:
        also = ""
        if broadcast:
            also = " (or a shape that broadcasts to it)"
        elif leading:
            also = f" (or a leading part of it: one id for all the rewards of each {per})"
        raise ValueError(
            f"task has shape {jnp.shape(task)}; expected {shape}, one task id per {per}{also}."
        )
    valid = f"task ids should be in [0, {num_tasks}) (num_tasks={num_tasks})"
    if not isinstance(task, jax.core.Tracer):
        values = np.asarray(task)
        bad = (values < 0) | (values >= num_tasks)
        if bad.any():
            where = np.argwhere(bad).tolist()[:5]
            raise ValueError(f"{valid}, got {values[bad].tolist()[:5]} at {per}s {where}.")
    # Ids narrower than 32 bits are compared as int32, which holds them exactly: K itself
    # may not fit their dtype (256 tasks and uint8 ids).
    ids = task.astype(jnp.int32) if jnp.iinfo(task.dtype).bits < 32 else task
    in_range = (ids >= 0) & (ids < num_tasks)
    if isinstance(task, jax.core.Tracer) and task.size:
        # Checked only where the caller runs under checkify.checkify; dropped otherwise.
        first_bad = jnp.argmin(in_range.ravel())
        checkify.debug_check(
            jnp.all(in_range),
            f"{valid}, got {{}} at flat index {{}} of the {per}s' ids ({{}} out of range).",
            task.ravel()[first_bad],
            first_bad,
            jnp.sum(~in_range),
        )
    # An id in [0, K) casts exactly; any other becomes -1, so that no wide id wraps into range.
    return jnp.where(in_range, ids.astype(jnp.int32), -1)


def check_count(name: str, value, *, minimum: int, maximum: int | None = None) -> int:
    """An integer hyperparameter (a number of axes, of tasks) as a Python int in range.

    Raises:
      TypeError: for a value that is not an integer (a bool or a float included).
      ValueError: for an integer below ``minimum`` or above ``maximum``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} should be an integer, got {name}={value!r}.")
    if value < minimum or (maximum is not None and value > maximum):
        valid = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} should be an integer {valid}, got {name}={value!r}.")
    return int(value)


MAX_TASKS = 2**31 - 1
"""The most tasks keyed statistics hold: task ids are compared and gathered as int32."""


def check_num_tasks(num_tasks) -> int | None:
    """``num_tasks`` as a Python int in ``[1, MAX_TASKS]``, or None.

    Raises:
      TypeError: for a value that is not an integer.
      ValueError: for a value outside ``[1, 2**31 - 1]`` (ids are int32).
    """
    if num_tasks is None:
        return None
    return check_count("num_tasks", num_tasks, minimum=1, maximum=MAX_TASKS)


def check_bool(name: str, value) -> bool:
    """A boolean hyperparameter as a Python bool.

    Python and NumPy bools qualify, and so do concrete 0-d bool arrays; a
    string (``"no"`` is truthy), a number or anything else is refused.

    Raises:
      TypeError: naming the parameter and its value, also for a traced value
        (hyperparameters are static: build the transform outside ``jit``).
    """
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} should be a bool, got the traced value {value}; build the transform "
            "outside jit (its hyperparameters are static)."
        )
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and value.dtype == bool
    ):
        return bool(value)
    raise TypeError(f"{name} should be a bool, got {name}={value!r}.")


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


def check_fits(name: str, value: float, dtype, *, may_vanish: bool = False) -> None:
    """Raises a ValueError if a nonzero ``value`` rounds to 0 or inf in ``dtype``.

    For hyperparameters that multiply arrays whose dtype is known only when
    the function is traced (``scale_reward``'s factor, the ``eps`` of the
    value transforms). ``may_vanish`` accepts a value that rounds to 0, for a
    term whose contribution is then below the result's rounding anyway.
    """
    with np.errstate(over="ignore", under="ignore"):
        rounded = np.asarray(value, dtype)
    if value != 0 and (np.isinf(rounded) or (rounded == 0 and not may_vanish)):
        info = jnp.finfo(dtype)
        raise ValueError(
            f"{name}={value!r} rounds to {rounded} in {np.dtype(dtype).name}, the dtype it "
            f"is applied in (magnitudes up to {float(info.max):.4g} fit): pass inputs of a "
            f"wider dtype or another {name}."
        )


def check_positive(name: str, value, dtype, *, allow_inf: bool = False) -> float:
    """A positive hyperparameter as a float, checked against the ``dtype`` it is used in.

    The value must be a normal number of ``dtype`` (from ``finfo.tiny`` to
    ``finfo.max``): a smaller one rounds to a subnormal or to 0 there (and
    XLA flushes subnormals to 0), a larger one to ``inf``, so the arithmetic
    would divide by zero or drop the hyperparameter. ``allow_inf`` also accepts
    ``inf`` (a bound that never binds).

    Raises:
      ValueError: naming the parameter, its value and the valid range.
    """
    info = jnp.finfo(dtype)
    # Compared as a Python float: a float16 value would compare in float16, where
    # float32's tiny rounds to 0.
    number = float(value) if is_real(value) else math.nan
    in_range = float(info.tiny) <= number <= float(info.max) or (allow_inf and number == math.inf)
    if not in_range:
        upper = "inf" if allow_inf else f"{float(info.max):.4g}"
        raise ValueError(
            f"{name} should be a positive number that is normal in {np.dtype(dtype).name}, "
            f"the dtype it is computed in (from {float(info.tiny):.4g} to {upper}), "
            f"got {name}={value!r}."
        )
    return float(value)
