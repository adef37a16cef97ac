"""What the single-env and vector Gymnasium wrappers share: input checks and ``save`` / ``load``."""

import functools
import math
import os
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np
from flax import serialization
from gymnasium import Env, Wrapper
from gymnasium import spaces as gym_spaces
from gymnasium.error import InvalidBound
from gymnasium.utils import RecordConstructorArgs
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from rewardnorm_jax._src.core import base, checkpoint, checks
from rewardnorm_jax._src.core import semantics as sem_lib
from rewardnorm_jax._src.stats import formulas
from rewardnorm_jax.gymnasium._stats import ObjectiveStats, RunningMeanStd, real


def _is_layout(reward_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a reward of ``reward_shape`` is one number or one k-vector (k >= 1) per ``shape``."""
    return reward_shape == shape or (reward_shape[:-1] == shape and reward_shape[-1] > 0)


def step_arrays(shape: tuple[int, ...], reward, terminated, truncated):
    """A step's rewards (float64) and episode flags (bool, true where nonzero) of ``shape``.

    The rewards have ``shape``, or ``shape + (k,)`` for a vector of k objectives, and each flag
    has ``shape`` (one flag per sub-environment); other shapes raise ValueError. Rewards that
    are not real numbers (complex numbers, strings, objects) and flags that are neither bools
    nor numbers (``"False"`` is truthy) raise TypeError: the core's
    :func:`~rewardnorm_jax._src.core.checks.check_reward` and
    :func:`~rewardnorm_jax._src.core.checks.check_flag`.
    """
    rewards, ends, cuts = np.asarray(reward), np.asarray(terminated), np.asarray(truncated)
    if not (  # the common case, checked at once: real rewards, boolean flags, one layout
        ends.shape == cuts.shape == shape
        and _is_layout(rewards.shape, shape)
        and rewards.dtype.kind in "biuf"
        and ends.dtype.kind == cuts.dtype.kind == "b"
    ):
        name = "rewards" if shape else "reward"
        checks.check_reward(name, reward)
        each = ", one per sub-environment" if shape else ""
        if not _is_layout(rewards.shape, shape):
            objectives = f"({', '.join(map(str, shape))}, k)" if shape else "(k,)"
            raise ValueError(
                f"the environment returned {name} of shape {rewards.shape}; expected {shape} "
                f"(one number{each}) or {objectives} (a vector of k >= 1 objectives{each})."
            )
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if np.shape(checks.check_flag(flag, value)) != shape:
                raise ValueError(
                    f"the environment returned {flag} of shape {np.shape(value)}; expected "
                    f"{shape} (one flag{each})."
                )
        ends, cuts = ends != 0, cuts != 0
    return rewards.astype(np.float64, copy=False), ends, cuts


def check_returns(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    """Tracked returns as a float64 array of ``shape`` (a number broadcasts), none NaN.

    A return past float64's range is ``inf`` (a run reaches it, and keeps it until its
    episode ends); NaN is refused, since no step produces it: the core's
    :func:`~rewardnorm_jax._src.core.checks.check_return`, as for a JAX state. A value that
    is not real numbers raises TypeError (:func:`~rewardnorm_jax._src.core.checks.check_reward`),
    another shape ValueError.
    """
    array = np.asarray(checks.check_reward(name, value), np.float64)
    if checks.broadcast_shape(array.shape, shape) != shape:
        raise ValueError(f"{name} should be a number or an array of shape {shape}, got {value!r}.")
    checks.check_return(array, name)
    return np.broadcast_to(array, shape)


def returns_property(name: str, kind: str) -> Any:
    """The property ``name`` over the wrapper's array ``_name`` of tracked returns."""
    attr = "_" + name

    def assign(self, value) -> None:
        getattr(self, attr)[...] = check_returns(name, value, getattr(self, attr).shape)

    doc = (
        f"The tracked discounted returns: {kind}. The wrapper's own array, so in-place writes "
        "take effect; an assignment is checked (returns of this shape, no NaN) and copied in."
    )
    return property(lambda self: getattr(self, attr), assign, doc=doc)


def clip_function(min_reward, max_reward, num_envs: int | None):
    """``numpy.clip`` to the bounds, after Gymnasium's ``ClipReward`` checks (and ours).

    With ``num_envs`` (a vector environment), a bound is a number or one per sub-environment.
    A bound that is not real numbers raises TypeError
    (:func:`~rewardnorm_jax._src.core.checks.check_reward`).
    """
    if min_reward is None and max_reward is None:
        raise InvalidBound("Both `min_reward` and `max_reward` cannot be None")
    for name, bound in (("min_reward", min_reward), ("max_reward", max_reward)):
        # numpy.clip returns NaN wherever a bound is NaN: every reward would be lost.
        if bound is not None and np.any(np.isnan(checks.check_reward(name, bound))):
            raise InvalidBound(f"`{name}` should not be NaN. Received {bound}")
        if num_envs is not None and np.shape(bound) not in ((), (num_envs,)):
            raise ValueError(
                f"{name} should be a number or one bound per sub-environment (shape "
                f"({num_envs},)), got shape {np.shape(bound)}."
            )
    bounded = max_reward is not None and min_reward is not None
    if bounded and np.any(np.asarray(max_reward) < np.asarray(min_reward)):
        raise InvalidBound(
            f"Min reward ({min_reward}) must be smaller than max reward ({max_reward})"
        )
    return functools.partial(np.clip, a_min=min_reward, a_max=max_reward)


class TransformRewardBase:
    """``func`` applied to the rewards: the single-env and vector ``TransformReward``.

    First in the bases of a Gymnasium reward wrapper, whose ``__init__`` it calls.
    """

    def __init__(self, env: Any, func: Callable[[Any], Any]):
        if not callable(func):
            raise ValueError(f"func should be callable, got {func!r}.")
        self.func = func
        RecordConstructorArgs.__init__(self, func=func)  # type: ignore[arg-type]  # a wrapper
        super().__init__(env)  # type: ignore[call-arg]  # the Gymnasium reward wrapper's


class ClipRewardBase:
    """``numpy.clip`` to bounds: the single-env and vector ``ClipReward``.

    First in the bases of a ``TransformReward``, whose ``__init__`` it calls with the clip.
    """

    def __init__(self, env: Any, min_reward=None, max_reward=None):
        num_envs = env.num_envs if isinstance(self, VectorWrapper) else None
        clip = clip_function(min_reward, max_reward, num_envs)
        RecordConstructorArgs.__init__(self, min_reward=min_reward, max_reward=max_reward)  # type: ignore[arg-type]  # a wrapper
        super().__init__(env, clip)  # type: ignore[call-arg]  # TransformRewardBase's


def describe_layout(objective_shape: tuple[int, ...]) -> str:
    """``"one number"`` or ``"a vector of k objectives"`` for a reward's objective axes."""
    return f"a vector of {objective_shape[0]} objectives" if objective_shape else "one number"


def saved_objective_shape(data: bytes, unreadable: tuple[int, ...]) -> tuple[int, ...]:
    """The objective axes a wrapper's checkpoint records, ``unreadable`` where it records none.

    ``(k,)`` for ``num_objectives = k`` in its metadata, ``()`` without (a scalar reward). An
    unreadable checkpoint, or a ``num_objectives`` that the core's
    :func:`~rewardnorm_jax._src.core.checks.check_count` refuses (not an integer >= 1), gives
    ``unreadable``, the loading wrapper's layout: :func:`~rewardnorm_jax.load_state` then says
    what is wrong, against that template.
    """
    try:
        body = serialization.msgpack_restore(serialization.msgpack_restore(data)["body"])
        num_objectives = body["metadata"].get("num_objectives")
        if num_objectives is None:
            return ()
        return (checks.check_count("num_objectives", num_objectives, minimum=1),)
    except Exception:  # noqa: BLE001  (malformed input, or no count: load_state reports it)
        return unreadable


def wrapper_stack(env) -> Iterator[Any]:
    """``env``, then the ``.env`` of each Gymnasium wrapper (single or vector) below it."""
    yield env
    while isinstance(env, (Wrapper, VectorWrapper)):
        env = env.env
        yield env


def declared_objective_shape(env) -> tuple[int, ...] | None:
    """The objective axes ``(k,)`` the environment declares, or None where it declares none.

    MO-Gymnasium's environments, and its vector environments (``MOSyncVectorEnv``,
    ``MOAsyncVectorEnv``), declare their reward as ``env.unwrapped.reward_space``, a Box of
    shape ``(k,)`` (one environment's reward, also for a vector environment). None also where
    a wrapper in ``env``'s stack (``env`` and each ``.env`` below it) is MO-Gymnasium's
    ``LinearReward``: it turns the vector into one number and declares no ``reward_space`` of its
    own, so the layout is unknown until the first step. (Without ``mo_gymnasium`` imported, no
    ``LinearReward`` can be in the stack.)
    """
    # Read from MO-Gymnasium's public module where it is imported; never imported here.
    linear = getattr(sys.modules.get("mo_gymnasium.wrappers"), "LinearReward", None)
    if isinstance(linear, type) and any(isinstance(each, linear) for each in wrapper_stack(env)):
        return None
    space = getattr(env.unwrapped, "reward_space", None)
    if isinstance(space, gym_spaces.Box) and len(space.shape) == 1 and space.shape[0] >= 1:
        return space.shape
    return None


def stats_shape(value) -> tuple[int, ...] | None:
    """The shape of running statistics, or None for a value that is not running statistics.

    The mean's shape, for this library's :class:`RunningMeanStd` (an :class:`ObjectiveStats` of
    k objectives: ``(k,)``) and for any other object with ``mean``, ``var``, ``count`` and
    ``update_from_moments`` (Gymnasium's ``RunningMeanStd``, SB3's).
    """
    if all(hasattr(value, name) for name in ("mean", "var", "count", "update_from_moments")):
        return np.shape(value.mean)
    return None


def describe_stats(value) -> str:
    """What ``value`` is, for an error message: its type, and its shape or objectives."""
    if isinstance(value, ObjectiveStats):
        return f"an ObjectiveStats of {len(value)} objectives"
    shape = stats_shape(value)
    if shape is not None:
        return f"a {type(value).__name__} of shape {shape}"
    return f"{value!r} (a {type(value).__name__}, not running statistics)"


def new_stats(shape: tuple[int, ...], objectives: bool = True) -> RunningMeanStd:
    """Fresh statistics of ``shape``: an :class:`ObjectiveStats` for ``(k,)`` if ``objectives``."""
    return ObjectiveStats(*shape) if objectives and len(shape) == 1 else RunningMeanStd(shape)


def own_stats(rms, objectives: bool = True, name: str = "return_rms") -> RunningMeanStd:
    """Running statistics as this library's: its own as they are, another's as a copy.

    Gymnasium's (or SB3's) ``RunningMeanStd`` becomes a :class:`RunningMeanStd` of its shape
    holding its mean, variance and count (one shared count, or one per entry); of shape ``(k,)``
    and with ``objectives``, an :class:`ObjectiveStats` (so does this library's of that shape),
    column i the statistics of objective i.
    """
    stats = new_stats(np.shape(rms.mean), objectives)  # the kind and shape it should have
    if isinstance(rms, type(stats)):
        return rms
    try:
        copy_stats(rms, stats)
    except ValueError as error:
        raise ValueError(
            f"{name} was assigned {describe_stats(rms)} that converts to no statistics of "
            f"this library: {error}"
        ) from error
    return stats


def check_kept_stats(rms, name: str = "return_rms") -> None:
    """A ValueError naming ``name`` where statistics used as they are give no statistics.

    Another's ``RunningMeanStd`` (Gymnasium's, of any prior count) kept as it is needs a finite
    mean, a variance >= 0 and a count above 0; otherwise the rewards it scales come out NaN.
    """
    rules = (
        ("mean", np.isfinite, "a finite mean"),
        ("var", lambda var: var >= 0, "a variance >= 0"),
        ("count", lambda count: (count > 0) & np.isfinite(count), "a finite count above 0"),
    )
    try:
        for field, valid, expected in rules:
            values = np.asarray(getattr(rms, field), np.float64)
            checks.refuse_where(field, values, ~valid(values), expected)
    except ValueError as error:
        raise ValueError(
            f"{name} was assigned {describe_stats(rms)} that gives no statistics: {error}"
        ) from error


def bounded_property(name: str, valid: str, within: Callable[[float], bool]) -> Any:
    """The hyperparameter ``name``: a Python float in ``self._name``, checked when assigned.

    A value that is not a real number raises ValueError; a real number for which ``within`` is
    false raises :class:`gymnasium.error.InvalidBound` with Gymnasium 1.4.0's message (it
    should be ``valid``). A NumPy scalar is stored as the Python float of the same value, which
    computes exactly as it does.
    """
    attr = "_" + name

    def assign(self, value) -> None:
        number = real(name, value)
        if not within(number):
            raise InvalidBound(f"`{name}` should be {valid}. Received {value}")
        setattr(self, attr, number)

    doc = f"``{name}``, {valid}: an assignment is checked (InvalidBound out of range)."
    return property(lambda self: getattr(self, attr), assign, doc=doc)


def copy_stats(source, target) -> None:
    """Writes the statistics ``source`` holds into ``target``, in place (its views see them).

    Every word, from this library's statistics to this library's (of the same shape); the mean,
    variance and count where either is another's (Gymnasium's or SB3's ``RunningMeanStd``).
    """
    if isinstance(source, RunningMeanStd) and isinstance(target, RunningMeanStd):
        target.stats = source.stats
    else:
        target.count, target.mean, target.var = source.count, source.mean, source.var


class HostStatistics:
    """``epsilon``, ``update_running_mean`` and ``save`` / ``load``: wrappers with host statistics.

    Subclasses give :meth:`state_dict`, :meth:`load_state_dict` and :meth:`_load_target`.
    """

    state_dict: Callable[[], dict[str, Any]]
    load_state_dict: Callable[[dict[str, Any]], None]
    _load_target: Callable[[bytes, str], tuple[dict[str, Any], dict[str, Any]]]

    @property
    def update_running_mean(self) -> bool:
        """Property to freeze/continue the running mean calculation of the reward statistics."""
        return self._update_running_mean

    @update_running_mean.setter
    def update_running_mean(self, setting: bool | np.bool_) -> None:
        # Bools only (TypeError otherwise): "False" is truthy, an array of flags ambiguous.
        self._update_running_mean = checks.check_bool("update_running_mean", setting)

    _epsilon: float
    # epsilon is added to the variance under the square root to keep the division away from
    # zero: zero or less (or NaN) gives inf or NaN rewards, inf gives zeros.
    epsilon = bounded_property(
        "epsilon", "strictly positive and finite", lambda epsilon: 0 < epsilon < math.inf
    )

    def save(self, path: str | os.PathLike) -> None:
        """Writes the statistics and the wrapper's arrays to ``path`` (msgpack with a checksum)."""
        state = self.state_dict()
        data = checkpoint.save_state(state, self._checkpoint_metadata(state))
        pathlib.Path(path).write_bytes(data)

    def load(self, path: str | os.PathLike) -> None:
        """Restores what :meth:`save` wrote.

        Raises:
            ValueError: for a file that is not such a checkpoint, is corrupt, was saved with
                another wrapper class, other hyperparameters or shapes (each difference named),
                or holds values no run produces.
        """
        data = pathlib.Path(path).read_bytes()
        template, metadata = self._load_target(data, os.fspath(path))
        self.load_state_dict(checkpoint.load_state(template, data, metadata))

    def _checkpoint_metadata(self, state: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint records beside ``state``: the wrapper's class and ``epsilon``."""
        cls = type(self)
        return {"wrapper": f"{cls.__module__}.{cls.__qualname__}", "epsilon": self.epsilon}


EnvT = TypeVar("EnvT", Env, VectorEnv)  # the environment a wrapper takes


class Normalizer(HostStatistics, Generic[EnvT]):
    """``gamma``, ``epsilon``, ``objectives``, ``update_running_mean`` and ``save`` / ``load``.

    The constructor of both ``NormalizeReward`` wrappers: a vector environment's
    ``metadata["autoreset_mode"]`` (NEXT_STEP if missing) decides the return's semantics, a
    single environment's are Gymnasium's. Out-of-range hyperparameters raise
    :class:`gymnasium.error.InvalidBound` with Gymnasium 1.4.0's messages (1.3.0 accepted them
    silently), other values ValueError (``objectives``, ``gamma`` and ``epsilon``) or
    TypeError (``update_running_mean``, which takes a bool), whenever they are set. ``gamma``
    and ``epsilon`` are stored as Python floats: a NumPy scalar computes exactly as the Python
    float of the same value. Subclasses name their per-environment arrays in ``_checkpointed``:
    pairs of (key in the file, attribute holding the array), the tracked returns first (of
    ``_returns_dtype``, with the objective axes of a vector reward), then the episode flags
    (bool).

    The reward's layout (one number, or a vector of k objectives, per environment) is set by the
    first step or a loaded checkpoint, whichever comes first: a vector reward gets returns with a
    trailing objective axis and, under ``objectives="each"``, :class:`ObjectiveStats`. Until
    then, the layout the environment declares (MO-Gymnasium's ``reward_space``, none with its
    ``LinearReward`` in the stack, see :func:`declared_objective_shape`) shapes the default
    statistics and returns, so that ``return_rms.set_state`` and ``save`` see that layout before
    the first step, and checks assignments to ``return_rms``. A first step or checkpoint of
    another layout replaces the default statistics while they hold the prior, and raises
    ValueError otherwise. Statistics assigned to ``return_rms`` are kept (see
    :attr:`return_rms`).
    """

    _checkpointed: tuple[tuple[str, str], ...]
    _returns_dtype: type[np.floating]

    def __init__(
        self,
        env: EnvT,
        gamma: base.Real = 0.99,
        epsilon: base.Real = 1e-8,
        *,
        objectives: str = "each",
    ):
        """Checks and records the hyperparameters, then wraps ``env`` in its declared layout."""
        self.gamma = gamma
        self.epsilon = epsilon
        self._objectives = checks.check_choice("objectives", objectives, ("each", "shared"))
        # The default is left out of the spec: a scalar wrapper's is Gymnasium's.
        options = {} if objectives == "each" else {"objectives": objectives}
        RecordConstructorArgs.__init__(self, gamma=gamma, epsilon=epsilon, **options)  # type: ignore[arg-type]  # a wrapper
        super().__init__(env)  # type: ignore[call-arg]  # the Gymnasium wrapper's
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        vector = isinstance(self, VectorWrapper)
        self._same_step = vector and AutoresetMode(mode) == AutoresetMode.SAME_STEP
        self._semantics = sem_lib.GYMNASIUM_SAME_STEP if self._same_step else sem_lib.GYMNASIUM
        self._update_running_mean = True
        # Set by the first step or a loaded checkpoint; until then the declared layout, if any.
        self._objective_shape: tuple[int, ...] | None = None
        self._declared_shape = declared_objective_shape(env)
        self._return_rms, self._rms_assigned = self._new_stats(self._layout()), False
        for attr, zeros in self._arrays(self._layout()).items():
            setattr(self, attr, zeros)

    _gamma: float
    # The return is multiplied by gamma every step: above 1 it diverges (gamma=99, a typo for
    # 0.99, overflows to inf), below 0 it flips sign every step.
    gamma = bounded_property("gamma", "in the interval [0, 1]", lambda gamma: 0 <= gamma <= 1)

    @property
    def objectives(self) -> str:
        """How a vector reward's objectives keep statistics: ``"each"`` or ``"shared"``."""
        return self._objectives

    @property
    def return_rms(self) -> Any:
        """The running statistics of the returns: assignable, the object assigned kept and used.

        Valid values: for a reward of one number, or under ``objectives="shared"``, a
        :class:`RunningMeanStd` of shape ``()`` (this library's, or Gymnasium's, used as is).
        Under ``objectives="each"``, for a vector reward of k objectives, an
        :class:`ObjectiveStats` of k objectives, or Gymnasium's ``RunningMeanStd(shape=(k,))``:
        column i of it, with its count, is objective i's statistics, so it is converted into an
        :class:`ObjectiveStats` holding those values (a copy). An assignment is checked against
        the layout once the first step or a loaded checkpoint has set it, before that against
        the layout the environment declares (see :func:`declared_objective_shape`), and raises
        ValueError naming the value and what is valid; so do values that give no statistics
        (a mean that is not finite, a negative or NaN variance, a count not above 0). Where
        neither is known, any value valid for some layout is kept (an assignment may precede
        the first step, as in Gymnasium's evaluation pattern
        ``eval_env.return_rms = train_env.return_rms``), and the step or checkpoint that sets
        the layout raises ValueError if it does not fit, changing nothing.
        """
        return self._return_rms

    @return_rms.setter
    def return_rms(self, value) -> None:
        shape, layout = stats_shape(value), self._known_layout()
        if layout is None:  # not known yet: statistics fit the layout they would serve
            layout = shape if shape is not None and _is_layout(shape, ()) else ()
        if shape is None or shape != self._stats_shape(layout):
            raise ValueError(
                f"return_rms should be {self._valid_stats(self._known_layout())}; got "
                f"{describe_stats(value)}."
            )
        if shape:
            value = own_stats(value)  # a copy as this library's, its values checked
        else:
            check_kept_stats(value)
        self._return_rms, self._rms_assigned = value, True

    def _valid_stats(self, objective_shape: tuple[int, ...] | None) -> str:
        """What ``return_rms`` may be for a layout (None: not known yet), for an error message."""
        scalar = "a RunningMeanStd of shape () (this library's or Gymnasium's)"
        if objective_shape == ():
            return f"{scalar} for this wrapper's reward of one number"
        k = objective_shape[0] if objective_shape else "k"
        if self._objectives == "shared":
            across = f" across the {k} objectives" if objective_shape else ""
            return f"{scalar}, as objectives='shared' keeps one scale{across}"
        each = (
            f"an ObjectiveStats of {k} objectives (or Gymnasium's RunningMeanStd of shape ({k},), "
            "converted), as objectives='each' keeps statistics"
        )
        if objective_shape:
            return f"{each} for each of the {k} objectives"
        either = f"{scalar} for a reward of one number, or for a vector of k objectives"
        return f"{either} {each} per objective"

    def _check_layout(self, objective_shape: tuple[int, ...], source: str) -> None:
        """A ValueError if the layout is set and ``source``'s differs; changes nothing."""
        current = self._objective_shape
        if current is not None and current != objective_shape:
            raise ValueError(
                f"{source} {describe_layout(objective_shape)} per environment, but this wrapper "
                f"normalizes {describe_layout(current)} (reward shape {current} per environment, "
                "set by its first step or a loaded checkpoint); a wrapper keeps one reward layout."
            )

    def _known_layout(self) -> tuple[int, ...] | None:
        """The layout set, else the one declared, else None."""
        return self._declared_shape if self._objective_shape is None else self._objective_shape

    def _layout(self) -> tuple[int, ...]:
        """The layout set, else the one declared, else one number."""
        return self._known_layout() or ()

    def _use_layout(self, objective_shape: tuple[int, ...], source: str) -> None:
        """Sets the layout on first use; a ValueError if ``source`` has another one.

        Statistics that fit the layout are kept, and so are arrays of its shape; other arrays
        start from zero. Statistics that do not fit are replaced only when they are the default
        and still the prior; otherwise ValueError, before anything changes.
        """
        self._check_layout(objective_shape, source)
        if self._objective_shape is None:
            self._return_rms = self._fitted_stats(objective_shape, source)
            for attr, zeros in self._arrays(objective_shape).items():
                if getattr(self, attr).shape != zeros.shape:
                    setattr(self, attr, zeros)
            self._objective_shape = objective_shape

    def _fitted_stats(self, objective_shape: tuple[int, ...], source: str):
        """``return_rms`` if it fits the layout, fresh statistics for an untouched default.

        The default is untouched while it equals the statistics :meth:`__init__` gave it (the
        prior, of the declared layout): nothing merged, set or loaded. Other statistics that do
        not fit (assigned ones) raise ValueError naming them, ``source`` (a step, a loaded state,
        ``save``) and what is valid.
        """
        rms = self._return_rms
        if stats_shape(rms) == self._stats_shape(objective_shape):
            return rms
        untouched = self._new_stats(self._layout()).get_state()
        if not self._rms_assigned and rms.get_state() == untouched:
            return self._new_stats(objective_shape)
        raise ValueError(
            f"return_rms holds {describe_stats(rms)}, but {source} "
            f"{describe_layout(objective_shape)} per environment: return_rms should be "
            f"{self._valid_stats(objective_shape)}."
        )

    def _stats_shape(self, objective_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The statistics' shape: one set per objective, or one set."""
        return objective_shape if self._objectives == "each" else ()

    def _new_stats(self, objective_shape: tuple[int, ...]):
        """Fresh statistics for a reward with these objective axes."""
        return new_stats(self._stats_shape(objective_shape))

    def _arrays(self, objective_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        """Zeroed per-environment arrays for a layout, by attribute: returns gain its axes."""
        envs = self.num_envs if isinstance(self, VectorWrapper) else 1
        (_, returns), *flags = self._checkpointed
        arrays = {attr: np.zeros(envs, bool) for _, attr in flags}
        return {returns: np.zeros((envs, *objective_shape), self._returns_dtype), **arrays}

    def _scaled(self, rewards: np.ndarray) -> np.ndarray:
        """``rewards / sqrt(var + epsilon)``, each objective by its variance for ObjectiveStats."""
        rms = self._return_rms
        var = rms.var if isinstance(rms, ObjectiveStats) else float(rms.var)
        # Without a clip, r / s leaves NaN and +-inf rewards as they are: no pass-through needed.
        return formulas.scale_by_std(np, rewards, var, self._epsilon, None, False)

    def _advance(self, returns: np.ndarray, rewards: np.ndarray, ends, cuts, active) -> np.ndarray:
        """Advances the tracked ``returns`` in place (``rewards`` of their shape); rewards scaled.

        The flags and ``active`` (None: every environment) broadcast against the rewards.
        """
        valid = np.isfinite(rewards) if active is None else active & np.isfinite(rewards)
        returns[...], _ = self._return_step(
            returns, rewards, ends, cuts, valid, active, self._learn_returns
        )
        return self._scaled(rewards)

    def _return_step(self, returns, rewards, ends, cuts, valid, active, learn_returns):
        """``(returns, statistics)`` after one step of this wrapper's return recurrence.

        :func:`~rewardnorm_jax._src.stats.formulas.return_step` with the wrapper's statistics,
        freeze flag, ``gamma`` and semantics: on arrays (:meth:`_advance`), or on Python numbers
        for one environment's scalar reward, ``learn_returns`` merging its one return.
        """
        return formulas.return_step(
            np,
            returns,
            self._return_rms,  # the attribute: no property call per step
            rewards,
            ends,
            cuts,
            self._update_running_mean,
            valid,
            active,
            gamma=self._gamma,
            semantics=self._semantics,
            learn_returns=learn_returns,
        )

    def _learn_returns(self, rms, returns: np.ndarray, selected: np.ndarray):
        """Merges the selected returns, as carried, into ``rms``; returns ``rms``.

        :class:`ObjectiveStats` merge each objective's returns (the last axis) into that
        objective's statistics; any other statistics merge all selected returns as one batch.
        The moments are those of the selected returns alone, as Gymnasium's ``np.mean`` /
        ``np.var`` of ``acc[active]`` (NumPy's pairwise sums of a where-masked array round
        differently).
        """
        parts = [(rms, returns, selected)]
        if isinstance(rms, ObjectiveStats):  # the objectives on the last axis
            axes = np.moveaxis(returns, -1, 0), np.moveaxis(selected, -1, 0)
            parts = list(zip(rms, *axes, strict=True))
        for stats, values, chosen in parts:
            batch = np.asarray(values[chosen], self._returns_dtype)  # as carried
            if batch.size:
                stats.update_from_moments(*formulas.batch_moments(batch), batch.size)
        return rms

    def state_dict(self) -> dict[str, Any]:
        """The statistics (a host :class:`~rewardnorm_jax.RunningStats`) and arrays, as copies.

        Statistics assigned to ``return_rms`` that do not fit the layout raise ValueError.
        """
        rms = self._fitted_stats(self._layout(), "the wrapper saves returns of")
        arrays = {key: np.array(getattr(self, attr), copy=True) for key, attr in self._checkpointed}
        return {"return_rms": own_stats(rms).stats, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` bit-exactly, or raises ValueError (changing nothing).

        A wrapper that has not stepped yet takes the layout of ``state`` (its returns' trailing
        axes); one that has raises ValueError for another layout, as do statistics assigned
        to ``return_rms`` that do not fit it. The statistics are restored into
        ``return_rms`` in place.
        """
        objective_shape = np.shape(state[self._checkpointed[0][0]])[1:]
        loaded = self._new_stats(objective_shape)
        loaded.stats = state["return_rms"]
        arrays, targets = {}, self._arrays(objective_shape)
        for key, attr in self._checkpointed:
            target, value = targets[attr], state[key]
            if target.dtype.kind == "f":
                value = check_returns(key, value, target.shape)
            elif np.shape(value) != target.shape:  # refused before anything is written
                raise ValueError(f"{key} should have shape {target.shape}, got {np.shape(value)}.")
            arrays[attr] = np.asarray(value, target.dtype)
        self._use_layout(objective_shape, "the state holds returns of")
        copy_stats(loaded, self._return_rms)  # in place: whoever shares return_rms sees them
        for attr, value in arrays.items():
            getattr(self, attr)[...] = value  # in place: references to the arrays stay live

    def _load_target(self, data: bytes, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The template and metadata of the checkpoint ``data``: of its reward layout, if any.

        A wrapper that has not stepped yet takes the checkpoint's reward layout (one number or k
        objectives); one that has raises ValueError for another layout.
        """
        objective_shape = saved_objective_shape(data, self._layout())
        self._check_layout(objective_shape, f"the checkpoint {source!r} holds")
        arrays = self._arrays(objective_shape)  # a fresh state_dict of the layout: the template
        state = {key: arrays[attr] for key, attr in self._checkpointed}
        template = {"return_rms": self._new_stats(objective_shape).stats, **state}
        return template, self._checkpoint_metadata(template)

    def _checkpoint_metadata(self, state: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint records beside ``state``: class, hyperparameters, reward layout."""
        objective_shape = np.shape(state[self._checkpointed[0][0]])[1:]  # the returns' axes
        metadata = {**HostStatistics._checkpoint_metadata(self, state), "gamma": self.gamma}
        if objective_shape:  # a scalar reward's checkpoint keeps the layout it always had
            metadata.update(objectives=self._objectives, num_objectives=objective_shape[0])
        return metadata
