"""Hyperparameter checks shared by the single-env and vector Gymnasium wrappers.

Out-of-range values raise :class:`gymnasium.error.InvalidBound` with
Gymnasium 1.4.0's messages (Gymnasium 1.3.0 accepted them silently); values
that are not real numbers raise ValueError.
"""

import functools
import math

import numpy as np
from gymnasium.error import InvalidBound

from rewardnorm_jax._src import base


def _real(name: str, value) -> float:
    """``value`` as a Python float: NumPy scalars compute exactly as Python floats."""
    if not base.is_real(value):
        raise ValueError(f"{name} should be a real number, got {name}={value!r}.")
    return float(value)


def check_gamma(gamma) -> float:
    """``gamma`` as a float, or :class:`~gymnasium.error.InvalidBound` unless 0 <= gamma <= 1."""
    value = _real("gamma", gamma)
    # The return is multiplied by gamma every step: above 1 it diverges (gamma=99,
    # a typo for 0.99, overflows to inf), below 0 it flips sign every step.
    if not 0 <= value <= 1:
        raise InvalidBound(f"`gamma` should be in the interval [0, 1]. Received {gamma}")
    return value


def check_epsilon(epsilon) -> float:
    """``epsilon`` as a float, or :class:`~gymnasium.error.InvalidBound` unless finite and > 0."""
    value = _real("epsilon", epsilon)
    # epsilon is added to the variance under the square root to keep the division
    # away from zero: zero or less (or NaN) gives inf or NaN rewards, inf gives zeros.
    if not value > 0:
        raise InvalidBound(f"`epsilon` should be strictly positive. Received {epsilon}")
    if not math.isfinite(value):
        raise InvalidBound(f"`epsilon` should be strictly positive and finite. Received {epsilon}")
    return value


def clip_function(min_reward, max_reward):
    """``numpy.clip`` to the bounds, after Gymnasium's ``ClipReward`` checks."""
    check_clip_bounds(min_reward, max_reward)
    return functools.partial(np.clip, a_min=min_reward, a_max=max_reward)


def check_clip_bounds(min_reward, max_reward) -> None:
    """Gymnasium's ``ClipReward`` checks: at least one bound, and min <= max."""
    if min_reward is None and max_reward is None:
        raise InvalidBound("Both `min_reward` and `max_reward` cannot be None")
    # numpy.clip returns NaN wherever a bound is NaN: every reward would be lost.
    for name, bound in (("min_reward", min_reward), ("max_reward", max_reward)):
        if bound is not None and np.any(np.isnan(np.asarray(bound, np.float64))):
            raise InvalidBound(f"`{name}` should not be NaN. Received {bound}")
    if (
        max_reward is not None
        and min_reward is not None
        and np.any(np.asarray(max_reward) - np.asarray(min_reward) < 0)
    ):
        raise InvalidBound(
            f"Min reward ({min_reward}) must be smaller than max reward ({max_reward})"
        )
