"""``save`` / ``load`` of a Gymnasium normalizer's statistics, as SB3's ``VecNormalize`` offers.

The file is :func:`rewardnorm_jax.save_state`'s format (msgpack with a
checksum, never pickle), holding the running statistics (``return_rms``),
the tracked returns and, for vector wrappers, which environments are waiting
for their autoreset step, so a restored wrapper continues exactly where the
saved one stopped. The wrapper's class, ``gamma``, ``epsilon`` and batch
shape are checked on load.
"""

import os
from typing import Any

import numpy as np

from rewardnorm_jax._src import checkpoint
from rewardnorm_jax.gymnasium._stats import RunningMeanStd


class SavesStatistics:
    """Mixin for the normalizing wrappers: ``save(path)``, ``load(path)``, ``state_dict()``.

    Subclasses name their per-environment arrays in ``_checkpointed``: pairs
    of (key in the file, attribute).
    """

    _checkpointed: tuple[tuple[str, str], ...] = ()
    return_rms: RunningMeanStd
    gamma: float
    epsilon: float

    def state_dict(self) -> dict[str, Any]:
        """The statistics and tracked returns as plain values and NumPy arrays (copies)."""
        arrays = {key: np.array(getattr(self, attr), copy=True) for key, attr in self._checkpointed}
        return {"return_rms": self.return_rms.get_state(), **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (bit-exact)."""
        self.return_rms.set_state(state["return_rms"])
        for key, attr in self._checkpointed:
            setattr(self, attr, np.array(state[key], copy=True))

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
            ValueError: if the file is not such a checkpoint, is corrupt, or
                was saved by another wrapper class, ``gamma``, ``epsilon`` or
                number of environments (the message names each difference).
        """
        with open(path, "rb") as file:
            data = file.read()
        template = self.state_dict()
        self.load_state_dict(checkpoint.load_state(template, data, self._checkpoint_metadata()))

    def _checkpoint_metadata(self) -> dict[str, Any]:
        cls = type(self)
        return {
            "wrapper": f"{cls.__module__}.{cls.__qualname__}",
            "gamma": float(self.gamma),
            "epsilon": float(self.epsilon),
        }
