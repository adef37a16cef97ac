"""What the single-env and vector ``NormalizeObservation`` share: statistics and arithmetic."""

import math
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from rewardnorm_jax._src.core import checks
from rewardnorm_jax.gymnasium._common import HostStatistics, describe_stats, own_stats, stats_shape
from rewardnorm_jax.gymnasium._stats import RunningMeanStd


class ObservationStatistics(HostStatistics):
    """``obs_rms`` and the normalization: ``(x - mean) / sqrt(var + epsilon)`` in float32.

    The statistics are a :class:`RunningMeanStd` of the observation's shape, on the host in
    float64 (each feature its own compensated sums and exact count); the arithmetic is done in
    float64 and rounded to float32 once, where Gymnasium computes in the observation space's
    dtype. Non-finite observation values are left out of the statistics (each feature counts
    its own samples) and come out non-finite.
    """

    _obs_rms: RunningMeanStd

    def _statistics_for(self, space, epsilon) -> gym_spaces.Box:
        """Sets up fresh statistics for observations of ``space``; the normalized space."""
        self.epsilon = epsilon
        if getattr(space, "shape", None) is None:
            raise ValueError(
                "NormalizeObservation wrapper requires the observation space to have a shape, "
                f"got observation_space={space}."
            )
        self._update_running_mean = True
        self._obs_rms = RunningMeanStd(space.shape)
        return gym_spaces.Box(-np.inf, np.inf, space.shape, np.float32)

    @property
    def obs_rms(self) -> RunningMeanStd:
        """The running statistics of the observations, a :class:`RunningMeanStd` (assignable).

        Assigned statistics of this library are kept and used (``eval_env.obs_rms =
        train_env.obs_rms`` shares them); Gymnasium's ``RunningMeanStd`` of the same shape is
        converted (a copy). Another shape, or a value that is not running statistics, raises
        ValueError.
        """
        return self._obs_rms

    @obs_rms.setter
    def obs_rms(self, value) -> None:
        shape = self._obs_rms.shape
        if stats_shape(value) != shape:
            raise ValueError(
                f"obs_rms should be running statistics of shape {shape} (the observation's), "
                f"got {describe_stats(value)}."
            )
        self._obs_rms = own_stats(value, objectives=False, name="obs_rms")

    def _normalize(self, observations, batch_shape: tuple[int, ...]) -> np.ndarray:
        """Merges ``observations`` (``batch_shape`` + the feature shape) if learning; normalized."""
        rms = self._obs_rms
        name = "observations" if batch_shape else "observation"
        x, expected = np.asarray(observations), (*batch_shape, *rms.shape)
        if x.dtype.kind not in "biuf":  # not real numbers: the core's TypeError names them
            checks.check_reward(name, observations)
        if x.shape != expected:
            raise ValueError(
                f"the environment returned {name} of shape {x.shape}; expected {expected} "
                "(the observation space's shape)."
            )
        if self._update_running_mean:
            batch = x.reshape(math.prod(batch_shape), *rms.shape)
            rms.update(batch.astype(np.float64))  # float64 batch moments
        return ((x - rms.mean) / np.sqrt(rms.var + self._epsilon)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """The statistics, as a host :class:`~rewardnorm_jax.RunningStats` (a copy)."""
        return {"obs_rms": self._obs_rms.stats}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` into ``obs_rms`` in place, or raises ValueError."""
        self._obs_rms.stats = state["obs_rms"]

    def _load_target(self, data: bytes, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A fresh :meth:`state_dict` and this wrapper's metadata, to load a checkpoint into."""
        template = {"obs_rms": RunningMeanStd(self._obs_rms.shape).stats}
        return template, self._checkpoint_metadata(template)
