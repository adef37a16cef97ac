"""Which reference a normalizer reproduces: the conventions, as data.

The three references (see the README's "Semantics" section) run the same
recurrence and differ only in these switches, so the recurrence is written
once (:mod:`rewardnorm_jax._src.reward.normalize`) and parameterised by a
:class:`Semantics` value.
"""

import dataclasses
from typing import TypeVar

import jax
import numpy as np

from rewardnorm_jax._src.core.checks import check_bool, is_real

_RESETS = ("never", "terminated", "done")
_Flag = TypeVar("_Flag", bool, np.ndarray, jax.Array)


@dataclasses.dataclass(frozen=True)
class Semantics:
    """Conventions of a discounted-return normalizer.

    Attributes:
      name: label used in messages.
      reset_before: episode flag that zeroes the return *before* the step's
        reward is added: ``"terminated"`` (Gymnasium), ``"done"`` =
        terminated or truncated (PureJaxRL), or ``"never"`` (SB3).
      reset_after: flag that zeroes the return *after* the statistics are
        updated: ``"done"`` (SB3, Gymnasium vector SAME_STEP) or ``"never"``.
      clip: symmetric bound of the normalized reward (SB3: 10), or None. For
        another bound, pass ``dataclasses.replace(semantics, clip=...)`` or
        chain a :func:`~rewardnorm_jax.clip_reward`.
      freeze_stops_return: whether freezing the statistics also stops the
        return from accumulating (SB3's ``training=False``) or not (Gymnasium's
        ``update_running_mean=False``).
    """

    name: str
    reset_before: str
    reset_after: str
    clip: float | None = None
    freeze_stops_return: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"name should be a string, got name={self.name!r}.")
        # A truthy string ("no") would silently stop the return; a NumPy bool is a bool.
        object.__setattr__(
            self, "freeze_stops_return", check_bool("freeze_stops_return", self.freeze_stops_return)
        )
        # A clip <= 0 (or NaN) would zero or flip every normalized reward.
        if self.clip is not None and not (is_real(self.clip, "clip") and self.clip > 0):
            raise ValueError(f"clip should be a positive number or None, got clip={self.clip!r}.")
        if self.clip is not None:  # a concrete array would make the semantics unhashable
            object.__setattr__(self, "clip", float(self.clip))
        # Both reset switches must name a known reset.
        for field in ("reset_before", "reset_after"):
            if getattr(self, field) not in _RESETS:
                raise ValueError(f"{field}={getattr(self, field)!r} must be one of {_RESETS}.")

    @classmethod
    def preset(cls, name: str) -> "Semantics":
        """The preset of that name.

        ``"gymnasium"``, ``"gymnasium_same_step"``, ``"sb3"``, ``"purejaxrl"`` or
        ``"non_episodic"``. A preset with another clip is
        ``dataclasses.replace(Semantics.preset("sb3"), clip=5.0)``.

        Raises:
          ValueError: for an unknown name.
        """
        return resolve(name)

    def flag(self, which: str, terminated: _Flag, truncated: _Flag) -> _Flag:
        """The boolean a reset switch (``reset_before``/``reset_after``) names.

        ``terminated`` and ``truncated`` are Python bools, NumPy arrays or JAX
        arrays; the result is of the same kind.
        """
        kind = getattr(self, which)
        if kind == "terminated":
            return terminated
        if kind == "done":
            return terminated | truncated
        return terminated & False  # all False, in any array namespace


GYMNASIUM = Semantics("gymnasium", reset_before="terminated", reset_after="never")
GYMNASIUM_SAME_STEP = Semantics(
    "gymnasium_same_step", reset_before="terminated", reset_after="done"
)
SB3 = Semantics(
    "sb3", reset_before="never", reset_after="done", clip=10.0, freeze_stops_return=True
)
PUREJAXRL = Semantics("purejaxrl", reset_before="done", reset_after="never")
NON_EPISODIC = Semantics("non_episodic", reset_before="never", reset_after="never")
"""A return that never resets at episode ends (intrinsic rewards, as RND's)."""

PRESETS = {s.name: s for s in (GYMNASIUM, GYMNASIUM_SAME_STEP, SB3, PUREJAXRL, NON_EPISODIC)}


def resolve(semantics: object) -> Semantics:
    """A :class:`Semantics` from a preset name or an instance."""
    if isinstance(semantics, Semantics):
        return semantics
    preset = PRESETS.get(semantics) if isinstance(semantics, str) else None
    if preset is None:  # a list, for one, would fail to hash inside the lookup
        raise ValueError(
            f"semantics={semantics!r} is not known; pick one of {sorted(PRESETS)} "
            "or pass a Semantics(...) instance."
        )
    return preset
