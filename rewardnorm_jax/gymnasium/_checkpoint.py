"""``save`` / ``load`` of a Gymnasium normalizer's statistics, as SB3's ``VecNormalize`` offers.

The file is :func:`rewardnorm_jax.save_state`'s format (msgpack with a
checksum, never pickle), holding the running statistics (``return_rms``, as
the core's :class:`~rewardnorm_jax.RunningStats`), the tracked returns and,
for vector wrappers, which environments are waiting for their autoreset
step, so a restored wrapper continues exactly where the saved one stopped.
The wrapper's class, ``gamma``, ``epsilon`` and batch shape are checked on
load, and so are the values: statistics no merge produces and non-finite
returns are refused.
"""

import os
from typing import Any

import jax
import numpy as np

from rewardnorm_jax._src import checkpoint
from rewardnorm_jax.gymnasium._stats import RunningMeanStd
from rewardnorm_jax.gymnasium._validation import check_epsilon, check_gamma


def check_returns(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    """Tracked returns as a float64 array of ``shape`` (a scalar broadcasts), all finite.

    Raises:
        ValueError: for another shape, a non-numeric value or a NaN or infinite return.
    """
    try:
        array = np.broadcast_to(np.asarray(value, np.float64), shape)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{name} should be a number or an array of shape {shape}, got {value!r}."
        ) from error
    if not np.isfinite(array).all():
        raise ValueError(f"{name} should hold finite returns, got {value!r}.")
    return array


def as_running_mean_std(rms) -> RunningMeanStd:
    """Our :class:`RunningMeanStd` for ``rms``, or one holding a Gymnasium one's statistics."""
    if isinstance(rms, RunningMeanStd):
        return rms
    ours = RunningMeanStd()
    ours.count = float(rms.count)
    ours.mean = float(np.asarray(rms.mean).item())
    ours.var = float(np.asarray(rms.var).item())
    return ours


class Hyperparameters:
    """``gamma``, ``epsilon`` and ``update_running_mean`` of a normalizing wrapper.

    Each is checked whenever it is set. ``gamma`` and ``epsilon`` are stored
    as Python floats, so a NumPy scalar (``np.float32(0.99)``) computes
    exactly as the Python float of the same value.
    """

    _gamma: float
    _epsilon: float
    _update_running_mean: bool

    def __init__(self, gamma, epsilon):
        """Checks and stores the hyperparameters; the statistics start learning."""
        self.gamma = gamma
        self.epsilon = epsilon
        self._update_running_mean = True

    @property
    def update_running_mean(self) -> bool:
        """Property to freeze/continue the running mean calculation of the reward statistics."""
        return self._update_running_mean

    @update_running_mean.setter
    def update_running_mean(self, setting: bool | np.bool_) -> None:
        # A string or an array would be truthy (or ambiguous) and freeze nothing.
        if not isinstance(setting, (bool, np.bool_)):
            raise ValueError(f"update_running_mean should be True or False, got {setting!r}.")
        self._update_running_mean = bool(setting)

    @property
    def gamma(self) -> float:
        """The discount factor of the tracked return, in [0, 1]."""
        return self._gamma

    @gamma.setter
    def gamma(self, value) -> None:
        self._gamma = check_gamma(value)

    @property
    def epsilon(self) -> float:
        """The stability parameter added to the variance, > 0 and finite."""
        return self._epsilon

    @epsilon.setter
    def epsilon(self, value) -> None:
        self._epsilon = check_epsilon(value)


class SavesStatistics(Hyperparameters):
    """Mixin for the normalizing wrappers: ``save(path)``, ``load(path)``, ``state_dict()``.

    Subclasses name their per-environment arrays in ``_checkpointed``: pairs
    of (key in the file, attribute holding the array).
    """

    _checkpointed: tuple[tuple[str, str], ...] = ()
    return_rms: Any

    def state_dict(self) -> dict[str, Any]:
        """The statistics (a host :class:`~rewardnorm_jax.RunningStats`) and arrays, as copies."""
        stats = jax.tree.map(np.array, as_running_mean_std(self.return_rms).stats)
        arrays = {key: np.array(getattr(self, attr), copy=True) for key, attr in self._checkpointed}
        return {"return_rms": stats, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (bit-exact), after checking the values.

        Raises:
            ValueError: for statistics no merge produces (a NaN or infinite
                mean, a negative or NaN ``m2``) or non-finite returns; nothing
                is changed then.
        """
        loaded = RunningMeanStd.from_running_stats(state["return_rms"])
        arrays = {}
        for key, attr in self._checkpointed:
            target = getattr(self, attr)
            value = state[key]
            if target.dtype.kind == "f":
                value = check_returns(key, value, target.shape)
            arrays[attr] = np.asarray(value, target.dtype)
        if isinstance(self.return_rms, RunningMeanStd):
            self.return_rms.stats = loaded.stats
        else:  # a Gymnasium RunningMeanStd assigned by the user: its own attributes
            self.return_rms.mean, self.return_rms.var = loaded.mean, loaded.var
            self.return_rms.count = loaded.count
        for attr, value in arrays.items():
            getattr(self, attr)[...] = value  # in place: references to the arrays stay live

    def save(self, path: str | os.PathLike) -> None:
        """Writes the statistics and tracked returns to ``path``.

        Example:
            >>> import os, tempfile
            >>> import gymnasium as gym
            >>> from rewardnorm_jax.gymnasium import NormalizeReward
            >>> env = NormalizeReward(gym.make("CartPole-v1"))
            >>> _ = env.reset(seed=0)
            >>> _ = env.step(0)
            >>> path = os.path.join(tempfile.mkdtemp(), "return_stats.msgpack")
            >>> env.save(path)
            >>> restored = NormalizeReward(gym.make("CartPole-v1"))
            >>> restored.load(path)
            >>> restored.return_rms.get_state() == env.return_rms.get_state()
            True
        """
        data = checkpoint.save_state(self.state_dict(), self._checkpoint_metadata())
        with open(path, "wb") as file:
            file.write(data)

    def load(self, path: str | os.PathLike) -> None:
        """Restores statistics and tracked returns saved by :meth:`save`.

        Raises:
            ValueError: if the file is not such a checkpoint, is corrupt, was
                saved by another wrapper class, ``gamma``, ``epsilon`` or
                number of environments (the message names each difference),
                or holds values no run produces.
        """
        with open(path, "rb") as file:
            data = file.read()
        template = self.state_dict()
        self.load_state_dict(checkpoint.load_state(template, data, self._checkpoint_metadata()))

    def _checkpoint_metadata(self) -> dict[str, Any]:
        cls = type(self)
        return {
            "wrapper": f"{cls.__module__}.{cls.__qualname__}",
            "gamma": self.gamma,
            "epsilon": self.epsilon,
        }
