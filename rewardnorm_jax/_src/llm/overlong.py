r"""DAPO's overlong penalty: a reward that falls linearly over the last tokens before the limit.

With :math:`L` an answer's length, :math:`L_\max` the generation limit,
:math:`L_b` the buffer before it and :math:`p` the penalty factor (Yu et al,
`DAPO <https://arxiv.org/abs/2503.14476>`_, 2025, eq. 13):

.. math::

    R(L) = -p \cdot \operatorname{clip}\!\Big(\frac{L - (L_\max - L_b)}{L_b}, 0, 1\Big),

0 up to :math:`L_\max - L_b`, then down to :math:`-p` at :math:`L_\max`.
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks

OVERLONG_CONVENTIONS = ("exact", "openrlhf", "verl", "tunix")
"""``exact`` and ``openrlhf`` cap the penalty at :math:`-p`; ``verl`` and ``tunix`` do not."""


def overlong_penalty(
    lengths,
    *,
    max_length: float,
    buffer_length: float,
    penalty_factor: float = 1.0,
    convention: str = "exact",
) -> jax.Array:
    r"""Each answer's overlong penalty, :math:`\le 0`, to add to its reward.

    Conventions:

    * ``"exact"`` (default, the paper's) and ``"openrlhf"``
      (``apply_overlong_penalty``): the penalty reaches :math:`-p` at
      :math:`L_\max` and stays there beyond it;
    * ``"verl"`` (its DAPO reward manager) and ``"tunix"`` (``dapo_learner``'s
      ``reward_shaping``): :math:`\min(0, -p\,(L - (L_\max - L_b)) / L_b)`,
      which keeps falling beyond :math:`L_\max`. Tunix measures :math:`L` in
      characters of the decoded answer, where it can exceed
      :math:`L_\max` tokens; verl in tokens.

    Args:
      lengths: each answer's length, real, finite and >= 0, any shape (from a
        response mask: ``mask.sum(-1)``), computed in float32 unless x64 is on
        (exact up to 2**24 tokens). A traced length out of range gives NaN.
      max_length: :math:`L_\max`, the generation limit, > 0.
      buffer_length: :math:`L_b`, in ``(0, max_length]``.
      penalty_factor: :math:`p`, finite and >= 0.
      convention: ``"exact"``, ``"openrlhf"``, ``"verl"`` or ``"tunix"``.

    Returns:
      The penalties, of ``lengths``' shape, in a floating dtype (float32 at least).

    Raises:
      ValueError: naming the option or input, its value and what is valid.

    Examples:
      >>> import rewardnorm_jax as rn
      >>> rn.overlong_penalty([100, 900, 950, 1000, 1100], max_length=1000,
      ...                     buffer_length=100).tolist()
      [0.0, 0.0, -0.5, -1.0, -1.0]
      >>> rn.overlong_penalty([1100], max_length=1000, buffer_length=100,
      ...                     convention="tunix").tolist()
      [-2.0]
    """
    checks.check_choice("convention", convention, OVERLONG_CONVENTIONS)
    _check_number("max_length", max_length, "> 0", lambda v: v > 0)
    _check_number(
        "buffer_length",
        buffer_length,
        f"in (0, max_length={max_length!r}]",
        lambda v: 0 < v <= max_length,
    )
    _check_number("penalty_factor", penalty_factor, ">= 0", lambda v: v >= 0)
    lengths = checks.as_floating("lengths", lengths)
    checks.check_positive("buffer_length", buffer_length, lengths.dtype)
    checks.check_fits("penalty_factor", float(penalty_factor), lengths.dtype, may_vanish=True)
    lengths = checks.as_lengths("lengths", lengths, lengths.dtype)
    # XLA divides by a scalar as a product with its reciprocal, subnormal (flushed to 0) for
    # a buffer past 2**126: both sides are first scaled by the power of two that brings the
    # buffer into [2, 4) (exactly, by a normal number; a buffer below 2 is left as it is).
    unit = min(1.0, math.ldexp(1.0, 2 - math.frexp(buffer_length)[1]))
    excess = (lengths - (max_length - buffer_length)) * unit / (buffer_length * unit)
    capped = convention in ("exact", "openrlhf")
    excess = jnp.clip(excess, 0, 1 if capped else None)
    return 0 - penalty_factor * excess  # +0.0, not -0.0, within the limit


def _check_number(name: str, value, valid: str, in_range: Callable[[float], bool]) -> None:
    """Raises a ValueError unless ``value`` is a finite real number ``in_range``."""
    if not (checks.is_real(value, name) and math.isfinite(value) and in_range(value)):
        raise ValueError(f"{name} should be a finite number {valid}, got {name}={value!r}.")
