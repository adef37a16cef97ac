"""The checks of every option and input: each names the parameter, its value and what is valid.

Options are checked once, when a transform's configuration is built (its
``__post_init__``); the inputs of ``init``, ``apply`` and ``step`` once per
call, by the wrapper :func:`~rewardnorm_jax._src.core.builder.make_transform` gives
every transform. Everything here runs at trace time and reads dtypes and
shapes only, so the compiled step carries none of it (the checks of traced
task ids are ``checkify`` checks, dropped where the caller does not
``checkify``).
"""

import dataclasses
import functools
import math
import numbers
import operator
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from rewardnorm_jax._src.core.base import Shape


def check_batch_shape(batch_shape, name: str = "batch_shape") -> Shape:
    """``batch_shape`` as a tuple of sizes: an int ``n`` means ``(n,)``.

    The one rule for every ``init(batch_shape)`` and statistics shape.

    Raises:
      TypeError: if ``batch_shape`` is not an int or a sequence of ints.
      ValueError: if a size is negative.
    """
    sizes = (batch_shape,) if _is_size(batch_shape) else batch_shape
    if not (isinstance(sizes, (tuple, list)) and all(map(_is_size, sizes))):
        raise TypeError(f"{name} should be an int or a tuple of ints, got {name}={batch_shape!r}.")
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


@functools.lru_cache(maxsize=256)
def expected_layout(init, *args) -> dict[str, str]:
    """The :func:`layout` of ``init(*args)``'s state, traced once per argument, never run."""
    return layout(jax.eval_shape(lambda: init(*args)))


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


def check_state(state, expected: Mapping[str, str], batch_shape: Shape, config) -> None:
    """Raises a ValueError at trace time if ``state`` does not have the ``expected`` layout.

    ``expected`` is :func:`layout` of the state the transform's ``init`` makes
    for ``batch_shape``. A state built by the same factory with other options
    (another ``statistics``, ``g_max``, ``dtype``) or by another transform would
    otherwise run silently with the wrong arithmetic, or fail deep inside it.
    The message lists every part that differs and the transform's
    configuration, whose options shape the state.

    Args:
      state: the state passed to ``update`` / ``apply`` / ``step``.
      expected: the layout of the state this transform makes.
      batch_shape: the batch shape the state claims (its per-environment fields' shape).
      config: the transform's configuration, named in the message.
    """
    found = layout(state)
    if found == expected:
        return
    paths = sorted(set(found) | set(expected))
    if found["state"] != expected["state"]:  # another transform's state: the type says it
        paths = ["state"]
    lines = [
        f"{path}: the state has {found.get(path, 'absent')}, this transform expects "
        f"{expected.get(path, 'absent')}"
        for path in paths
        if found.get(path, "absent") != expected.get(path, "absent")
    ]
    raise ValueError(
        f"the state does not match this transform, {config}"
        + (f", for batch_shape={batch_shape}" if batch_shape else "")
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


def as_floating(name: str, value) -> jax.Array:
    """``value``, checked to hold real numbers, as an array of a floating dtype.

    Floating values keep their dtype, widened to float32 at least (bfloat16 and
    float16 values are computed in float32); bool and integer values (0/1
    rewards, token counts) take the default float, float32 unless x64 is on.
    A wide integer is cast as it is, never wrapped first.

    Raises:
      TypeError: naming ``name``, as :func:`check_reward`.
    """
    check_reward(name, value)
    if not isinstance(value, jax.Array):
        value = np.asarray(value)
    dtype = jnp.promote_types(value.dtype, jnp.float32)
    if not jnp.issubdtype(value.dtype, jnp.floating):
        dtype = jnp.dtype(jnp.result_type(float))
    dtype = jax.dtypes.canonicalize_dtype(dtype)  # float64 is float32 without x64
    with np.errstate(over="ignore"):
        return jnp.asarray(value.astype(dtype))


def as_weights(name: str, mask, dtype) -> jax.Array:
    """``mask`` as per-position weights of ``dtype``: bools and 0/1 flags, or any weights >= 0.

    Trainers multiply by their masks, so that a float mask weights each
    position; the library takes a mask the same way, whether it is concrete
    or traced. A concrete weight that is negative or not finite is refused; a
    traced one becomes NaN, so that whatever it enters is NaN rather than a
    wrong number.

    Raises:
      TypeError: for a mask of another dtype (strings, complex numbers).
      ValueError: naming ``name`` and its first weight out of range.
    """
    if not _is_real_dtype(_dtype_of(mask)):
        raise TypeError(
            f"{name} should hold bools, 0/1 flags or weights >= 0, one per position, got "
            f"{name}={describe(mask)}."
        )
    return _non_negative(name, mask, dtype, "bools, 0/1 flags or finite weights >= 0")


def as_lengths(name: str, lengths, dtype) -> jax.Array:
    """``lengths`` as an array of ``dtype``: concrete ones checked finite and >= 0.

    A traced length out of range becomes NaN, so that whatever it enters is
    NaN rather than a wrong number.

    Raises:
      TypeError: for lengths that are not real numbers.
      ValueError: naming ``name`` and its first length out of range.
    """
    check_reward(name, lengths)
    return _non_negative(name, lengths, dtype, "finite lengths >= 0")


def _non_negative(name: str, values, dtype, valid: str) -> jax.Array:
    """``values`` as ``dtype``; concrete ones refused unless finite and >= 0, traced ones NaN."""
    if not isinstance(values, jax.core.Tracer):
        with np.errstate(over="ignore"):
            concrete = np.asarray(values).astype(dtype)
        refuse_where(
            name,
            concrete,
            ~(concrete >= 0) | np.isinf(concrete),
            f"{valid} (that fit {np.dtype(dtype).name})",
        )
    values = jnp.asarray(values, dtype)
    return jnp.where((values >= 0) & jnp.isfinite(values), values, jnp.nan)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``; a ValueError naming ``name`` otherwise."""
    if not (isinstance(value, str) and value in choices):
        raise ValueError(
            f"{name} should be one of {', '.join(map(repr, choices))}, got {name}={value!r}."
        )
    return value


def check_static(name: str, value, kind: str = "number") -> None:
    """Raises a TypeError naming ``name`` if ``value`` is traced: it configures the computation.

    Hyperparameters (a discount, a clamp, a length limit) shape the compiled
    computation: they are read when a transform is built or a function traced,
    so they are given outside ``jit``. Every hyperparameter check calls this
    first (:func:`is_real` and :func:`check_bool` do). ``kind`` is what the
    value should be (``"number"``, ``"bool"``).

    Example:
      >>> jax.jit(lambda g: check_static("gamma", g))(0.9)  # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ...
      TypeError: gamma should be a concrete number, got the traced value ...: pass gamma as a ...
    """
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name} should be a concrete {kind}, got the traced value {value}: pass {name} as a "
            f"Python {kind} or a concrete array; hyperparameters are static, so give them "
            "outside jit."
        )


def broadcast_shape(*shapes: Shape) -> Shape | None:
    """The shape ``shapes`` broadcast to; None if they do not broadcast."""
    try:
        return jnp.broadcast_shapes(*shapes)
    except ValueError:
        return None


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


def check_update_stats(update_stats, shapes: tuple[Shape, ...] = ((),)):
    """``update_stats``, returned as it is, after checking it is a flag of one of ``shapes``.

    A transform's ``step`` takes one scalar flag, Python or traced, for the
    statistics it shares; an adapter's :func:`~rewardnorm_jax.brax.set_update_stats`
    also takes one per environment of a state batched by ``jax.vmap``.

    Raises:
      TypeError: for a flag that is not a number (:func:`check_flag`).
      ValueError: naming ``update_stats``, its shape and the valid shapes.
    """
    check_flag("update_stats", update_stats)
    if jnp.shape(update_stats) not in shapes:
        valid = " or ".join(str(shape) for shape in dict.fromkeys(shapes) if shape != ())
        raise ValueError(
            f"update_stats has shape {jnp.shape(update_stats)}; it must be a scalar boolean "
            "(one flag for the shared statistics, Python or traced)"
            + (f" or have shape {valid}." if valid else ".")
        )
    return update_stats


def check_task(
    task,
    shape: Shape,
    num_tasks: int,
    per: str,
    *,
    broadcast: bool = False,
    leading: bool = False,
    name: str = "task",
    bound: str = "num_tasks",
    plural: str = "task ids",
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
      name: the ids' parameter, for the messages (``group_ids``).
      bound: the parameter that sets :math:`K`, for the messages (``num_groups``).
      plural: what the ids are, in the plural, for the messages (``group ids``).

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
            f"{name} should be integer ids in [0, {num_tasks}), one per {per}, got "
            f"{name}={describe(task)}."
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
            f"{name} has shape {jnp.shape(task)}; expected {shape}, "
            f"one {plural[:-1]} per {per}{also}."
        )
    valid = f"{plural} should be in [0, {num_tasks}) ({bound}={num_tasks})"
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
        (:func:`check_static`).
    """
    check_static(name, value, "bool")
    if isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and value.dtype == bool
    ):
        return bool(value)
    raise TypeError(f"{name} should be a bool, got {name}={value!r}.")


def is_real(value, name: str) -> bool:
    """Whether the hyperparameter ``name`` is a real number, not a bool.

    Python and NumPy scalars qualify, and so do concrete 0-d NumPy or JAX
    arrays of an integer or floating dtype (``jnp.float32(0.99)``).

    Raises:
      TypeError: naming ``name`` for a traced value (:func:`check_static`):
        hyperparameters configure the compiled computation.
    """
    check_static(name, value)
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


def check_non_negative(name: str, value, dtype, *, may_vanish: bool = False) -> float:
    """A hyperparameter >= 0 as a float: finite, and (unless ``may_vanish``) not rounding to 0.

    Raises:
      ValueError: naming the parameter, its value and the valid range
        (:func:`check_fits` for one that rounds to 0 or inf in ``dtype``).
    """
    if not (is_real(value, name) and 0.0 <= value < math.inf):
        raise ValueError(f"{name} should be a finite number >= 0, got {name}={value!r}.")
    check_fits(name, float(value), dtype, may_vanish=may_vanish)
    return float(value)


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
    number = float(value) if is_real(value, name) else math.nan
    in_range = float(info.tiny) <= number <= float(info.max) or (allow_inf and number == math.inf)
    if not in_range:
        upper = "inf" if allow_inf else f"{float(info.max):.4g}"
        raise ValueError(
            f"{name} should be a positive number that is normal in {np.dtype(dtype).name}, "
            f"the dtype it is computed in (from {float(info.tiny):.4g} to {upper}), "
            f"got {name}={value!r}."
        )
    return float(value)


def check_gamma(gamma) -> float:
    """The discount factor as a float in [0, 1].

    Raises:
      ValueError: for anything else (gamma > 1 makes the return diverge,
        gamma < 0 flips its sign every step).
    """
    if not (is_real(gamma, "gamma") and 0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma should be in the interval [0, 1], got gamma={gamma!r}.")
    return float(gamma)


def refuse_task(task, name: str) -> None:
    """Raises a ValueError for task ids given to a transform that keeps no per-task statistics."""
    if task is not None:
        raise ValueError(
            f"task was given ({describe(task)}), but {name} keeps no per-task statistics "
            "(num_tasks=None), so the ids would be ignored: build it with per-task statistics "
            "(e.g. rn.normalize_reward(0.99, statistics=rn.Statistics(num_tasks=K))), or "
            "leave task out."
        )


def refuse_where(name: str, values, bad, expected: str) -> None:
    """Raises a ValueError naming ``name`` and its first value where ``bad`` holds."""
    values, bad = np.asarray(values), np.asarray(bad)
    if np.any(bad):
        value = np.broadcast_to(values, bad.shape)[bad].flat[0].item()
        raise ValueError(f"{name} holds {value!r}; expected {expected}.")


def check_return(ret, name: str = "ret") -> None:
    """Raises a ValueError if a tracked discounted return is NaN.

    A step never makes the return NaN: non-finite rewards are left out of it.
    It can overflow to ``+-inf`` (returns beyond the dtype's range), which
    saturates the statistics as it does in a run, so infinities load.
    """
    values = np.asarray(ret)
    refuse_where(name, values, np.isnan(values), "a return that is not NaN (+-inf once overflowed)")
