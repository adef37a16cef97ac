"""What the single-env and vector Gymnasium wrappers share: input checks and ``save`` / ``load``."""

import functools
import math
import os
import pathlib
from typing import Any

import numpy as np
from gymnasium.error import InvalidBound
from gymnasium.utils import RecordConstructorArgs

from rewardnorm_jax._src import checkpoint
from rewardnorm_jax.gymnasium._stats import RunningMeanStd, real

# Python and NumPy scalars that are real numbers (bools included): a step's fast path.
REAL_SCALARS = (float, int, np.floating, np.integer, np.bool_)


def real_array(name: str, value, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``value`` as an array of a bool, integer or floating dtype (and ``shape``), or a ValueError.

    Complex numbers (their imaginary part would be dropped), strings (``"False"`` is truthy) and
    other objects are refused, and so are a vector-valued reward for one environment and one
    flag for all sub-environments.
    """
    array = np.asarray(value)
    if shape is not None and array.shape != shape:
        expected = f"{shape}, one per sub-environment" if shape else "() (one number)"
        if name == "reward":
            expected += "; vector-valued (multi-objective) rewards are not supported"
        raise ValueError(
            f"the environment returned {name} of shape {array.shape}; expected {expected}."
        )
    if array.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} should hold real numbers (a bool, integer or floating dtype), got "
            f"{name}={value!r} of dtype {array.dtype}."
        )
    return array


def step_arrays(shape: tuple[int, ...], reward, terminated, truncated):
    """A step's rewards (float64) and episode flags (bool, true where nonzero) of ``shape``."""
    rewards, ends, cuts = np.asarray(reward), np.asarray(terminated), np.asarray(truncated)
    if not (  # the common case, checked at once: real rewards, boolean flags, one shape
        rewards.shape == ends.shape == cuts.shape == shape
        and rewards.dtype.kind in "biuf"
        and ends.dtype.kind == cuts.dtype.kind == "b"
    ):
        rewards = real_array("rewards" if shape else "reward", reward, shape)
        ends = real_array("terminated", terminated, shape) != 0
        cuts = real_array("truncated", truncated, shape) != 0
    return rewards.astype(np.float64, copy=False), ends, cuts


def check_returns(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    """Tracked returns as a float64 array of ``shape`` (a number broadcasts), none NaN.

    A return past float64's range is ``inf`` (a run reaches it, and keeps it until its
    episode ends); NaN is refused, since no step produces it.
    """
    try:
        array = np.broadcast_to(real_array(name, value).astype(np.float64), shape)
    except ValueError as error:
        raise ValueError(
            f"{name} should be a number or an array of shape {shape}, got {value!r}."
        ) from error
    if np.isnan(array).any():
        raise ValueError(f"{name} should hold returns a run reaches (no NaN), got {value!r}.")
    return array


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


def clip_function(min_reward, max_reward):
    """``numpy.clip`` to the bounds, after Gymnasium's ``ClipReward`` checks (and ours)."""
    if min_reward is None and max_reward is None:
        raise InvalidBound("Both `min_reward` and `max_reward` cannot be None")
    for name, bound in (("min_reward", min_reward), ("max_reward", max_reward)):
        # numpy.clip returns NaN wherever a bound is NaN: every reward would be lost.
        if bound is not None and np.any(np.isnan(real_array(name, bound))):
            raise InvalidBound(f"`{name}` should not be NaN. Received {bound}")
    bounded = max_reward is not None and min_reward is not None
    if bounded and np.any(np.asarray(max_reward) < np.asarray(min_reward)):
        raise InvalidBound(
            f"Min reward ({min_reward}) must be smaller than max reward ({max_reward})"
        )
    return functools.partial(np.clip, a_min=min_reward, a_max=max_reward)


def check_callable(func):
    """``func`` if it is callable, else a ValueError."""
    if not callable(func):
        raise ValueError(f"func should be callable, got {func!r}.")
    return func


class Normalizer:
    """``gamma``, ``epsilon``, ``update_running_mean`` and ``save`` / ``load`` of a normalizer.

    Out-of-range hyperparameters raise :class:`gymnasium.error.InvalidBound` with Gymnasium
    1.4.0's messages (1.3.0 accepted them silently), other values ValueError, whenever they are
    set. ``gamma`` and ``epsilon`` are stored as Python floats: a NumPy scalar computes exactly as
    the Python float of the same value. Subclasses name their per-environment arrays in
    ``_checkpointed``: pairs of (key in the file, attribute holding the array).
    """

    _checkpointed: tuple[tuple[str, str], ...] = ()
    return_rms: Any
    _gamma: float
    _epsilon: float
    _update_running_mean: bool

    def __init__(self, gamma, epsilon):
        """Checks, stores and records the hyperparameters; the statistics start from the prior."""
        self.gamma = gamma
        self.epsilon = epsilon
        self._update_running_mean = True
        self.return_rms = RunningMeanStd()
        RecordConstructorArgs.__init__(self, gamma=gamma, epsilon=epsilon)  # type: ignore[arg-type]  # a wrapper

    @property
    def update_running_mean(self) -> bool:
        """Property to freeze/continue the running mean calculation of the reward statistics."""
        return self._update_running_mean

    @update_running_mean.setter
    def update_running_mean(self, setting: bool | np.bool_) -> None:
        # A string ("False" is truthy) or an array would freeze nothing, or be ambiguous.
        if not isinstance(setting, (bool, np.bool_)):
            raise ValueError(f"update_running_mean should be True or False, got {setting!r}.")
        self._update_running_mean = bool(setting)

    @property
    def gamma(self) -> float:
        """The discount factor of the tracked return, in [0, 1]."""
        return self._gamma

    @gamma.setter
    def gamma(self, value) -> None:
        gamma = real("gamma", value)
        # The return is multiplied by gamma every step: above 1 it diverges (gamma=99,
        # a typo for 0.99, overflows to inf), below 0 it flips sign every step.
        if not 0 <= gamma <= 1:
            raise InvalidBound(f"`gamma` should be in the interval [0, 1]. Received {value}")
        self._gamma = gamma

    @property
    def epsilon(self) -> float:
        """The stability parameter added to the variance, > 0 and finite."""
        return self._epsilon

    @epsilon.setter
    def epsilon(self, value) -> None:
        epsilon = real("epsilon", value)
        # epsilon is added to the variance under the square root to keep the division
        # away from zero: zero or less (or NaN) gives inf or NaN rewards, inf gives zeros.
        if not 0 < epsilon < math.inf:
            raise InvalidBound(
                f"`epsilon` should be strictly positive and finite. Received {value}"
            )
        self._epsilon = epsilon

    def state_dict(self) -> dict[str, Any]:
        """The statistics (a host :class:`~rewardnorm_jax.RunningStats`) and arrays, as copies."""
        rms = self.return_rms
        if not isinstance(rms, RunningMeanStd):  # a Gymnasium RunningMeanStd assigned by the user
            if np.shape(rms.mean) != ():
                raise ValueError(
                    "return_rms should hold one set of statistics of shape () (the rewards' "
                    f"statistics), got a {type(rms).__name__} of shape {np.shape(rms.mean)}."
                )
            rms = RunningMeanStd()
            rms.count, rms.mean, rms.var = (
                np.asarray(getattr(self.return_rms, key)).item() for key in ("count", "mean", "var")
            )
        arrays = {key: np.array(getattr(self, attr), copy=True) for key, attr in self._checkpointed}
        return {"return_rms": rms.stats, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` bit-exactly, or raises ValueError (changing nothing)."""
        loaded = RunningMeanStd.from_running_stats(state["return_rms"])
        arrays = {}
        for key, attr in self._checkpointed:
            target, value = getattr(self, attr), state[key]
            if target.dtype.kind == "f":
                value = check_returns(key, value, target.shape)
            arrays[attr] = np.asarray(value, target.dtype)
        if isinstance(self.return_rms, RunningMeanStd):
            self.return_rms.set_state(loaded.get_state())
        else:  # a Gymnasium RunningMeanStd assigned by the user: its own attributes
            rms = self.return_rms
            rms.mean, rms.var, rms.count = loaded.mean, loaded.var, loaded.count
        for attr, value in arrays.items():
            getattr(self, attr)[...] = value  # in place: references to the arrays stay live

    def save(self, path: str | os.PathLike) -> None:
        """Writes the statistics and tracked returns to ``path`` (msgpack with a checksum)."""
        data = checkpoint.save_state(self.state_dict(), self._checkpoint_metadata())
        pathlib.Path(path).write_bytes(data)

    def load(self, path: str | os.PathLike) -> None:
        """Restores what :meth:`save` wrote.

        Raises:
            ValueError: for a file that is not such a checkpoint, is corrupt, was saved with
                another wrapper class, ``gamma``, ``epsilon`` or number of environments (each
                difference named), or holds values no run produces.
        """
        data, metadata = pathlib.Path(path).read_bytes(), self._checkpoint_metadata()
        self.load_state_dict(checkpoint.load_state(self.state_dict(), data, metadata))

    def _checkpoint_metadata(self) -> dict[str, Any]:
        cls = type(self)
        wrapper = f"{cls.__module__}.{cls.__qualname__}"
        return {"wrapper": wrapper, "gamma": self.gamma, "epsilon": self.epsilon}
