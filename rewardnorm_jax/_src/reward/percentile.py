r"""Return scaling by the range of its percentiles (DreamerV3).

DreamerV3 keeps exponential moving averages of the 5th and 95th percentiles of
its returns across the batch and divides advantages by
:math:`\max(1, P_{95} - P_{5})`: large return ranges are scaled down, small
ones (sparse rewards) are left alone instead of being blown up.

Two ways to use it:

* plain functions on any array: :func:`update_percentiles` with a batch of
  returns, then divide advantages (or returns) by :func:`percentile_scale`;
* a reward transform, :func:`percentile_scale_reward`, that tracks the
  discounted return of every environment (the same recurrence as
  :func:`~rewardnorm_jax.normalize_reward`) and divides rewards by the scale.
"""

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rewardnorm_jax._src.core import base, builder, checks
from rewardnorm_jax._src.core import semantics as sem_lib
from rewardnorm_jax._src.reward import normalize as norm_lib
from rewardnorm_jax._src.stats import running as rs


class PercentileState(struct.PyTreeNode):
    """Moving averages of a low and a high percentile."""

    low: jax.Array  # (), EMA of the low percentile (5th by default)
    high: jax.Array  # (), EMA of the high percentile (95th by default)

    def check_values(self, name: str) -> None:
        """Finite averages, the low one at most the high one (every update keeps that order)."""
        low, high = np.asarray(self.low), np.asarray(self.high)
        checks.refuse_where(f"{name}.low", low, ~np.isfinite(low), "a finite moving percentile")
        checks.refuse_where(f"{name}.high", high, ~np.isfinite(high), "a finite moving percentile")
        checks.refuse_where(
            f"{name}.low",
            low,
            ~(low <= high),
            f"a low percentile <= the high one ({name}.high holds {high.flat[0].item()!r})"
            if high.size == 1
            else "a low percentile <= the high one",
        )


class PercentileScaleRewardState(struct.PyTreeNode):
    """State of :func:`percentile_scale_reward`."""

    percentiles: PercentileState  # EMAs of the return percentiles, shared by the batch
    ret: jax.Array = base.per_env_field()  # batch_shape, the tracked discounted return G

    def check_values(self, name: str) -> None:
        """A return that is not NaN (the percentiles check their own)."""
        checks.check_return(self.ret, f"{name}.ret")


def _check_update_options(rate, low, high, dtype) -> float:
    # rate 0 (or one that rounds to 0 in dtype) never moves the averages;
    # rate > 1 overshoots and oscillates.
    rate = checks.check_positive("rate", rate, dtype)
    if rate > 1.0:
        raise ValueError(f"rate should be in the interval (0, 1], got rate={rate!r}.")
    # A range needs low < high inside [0, 100].
    if not (
        checks.is_real(low, "low") and checks.is_real(high, "high") and 0.0 <= low < high <= 100.0
    ):
        raise ValueError(
            f"percentiles should satisfy 0 <= low < high <= 100, got low={low!r}, high={high!r}."
        )
    return rate


def _check_percentiles(state) -> jnp.dtype:
    """The dtype of a :class:`PercentileState`; raises ValueError for anything else."""
    dtype = jnp.dtype(getattr(getattr(state, "low", None), "dtype", None))
    scalar = f"{dtype.name}[]"
    expected = {"state": "PercentileState", "low": scalar, "high": scalar}
    if not (dtype in (jnp.float32, jnp.float64) and checks.layout(state) == expected):
        raise ValueError(
            "state should be a PercentileState of two float32 or float64 scalars, as "
            f"init_percentiles() makes, got {checks.layout(state)}."
        )
    return jnp.dtype(dtype)


def init_percentiles(dtype=None) -> PercentileState:
    """Both moving averages at 0, as in DreamerV3.

    Args:
      dtype: float32 or float64; default float64 under x64, else float32.
    """
    zero = jnp.zeros((), rs.check_dtype(dtype))
    return PercentileState(low=zero, high=zero)


def update_percentiles(
    state: PercentileState,
    values: jax.typing.ArrayLike,
    mask: jax.typing.ArrayLike | None = None,
    *,
    rate: base.Real = 0.01,
    low: base.Real = 5.0,
    high: base.Real = 95.0,
    axis_name=None,
) -> PercentileState:
    r"""Moves the averages towards the percentiles of a batch.

    .. math::
      L' = (1 - \alpha) L + \alpha\, \operatorname{Per}(x, p_{low}), \qquad
      H' = (1 - \alpha) H + \alpha\, \operatorname{Per}(x, p_{high})

    over every entry of ``values`` (all axes), with linear interpolation
    between order statistics (``numpy.percentile``'s default). As in DreamerV3
    the averages start at 0 and are not debiased: the scale grows from
    :math:`\max(1, \cdot) = 1` over roughly :math:`1 / \alpha` updates.
    Masked-out and non-finite entries are ignored; a batch without any valid
    entry leaves the state unchanged.

    Cross-device (``axis_name``): the values are ``all_gather``-ed so every
    participant computes the exact percentiles of the global batch. That costs
    :math:`P \cdot B` values of communication and memory per participant and a
    sort of :math:`P \cdot B` values on each (:math:`P` participants, :math:`B`
    values each), which is negligible for the thousands of returns of a
    training step but grows with the global batch; DreamerV3 does the same.
    A tuple of names gathers along each in turn. The result is then reduced
    with a ``pmax`` of two scalars (a no-op on values already identical), so
    ``shard_map``'s replication check sees it as replicated (``P()``).

    Args:
      state: current averages.
      values: a batch of returns (any shape).
      mask: optional boolean of ``values``' shape; ``False`` entries are left out.
      rate: :math:`\alpha \in (0, 1]`, DreamerV3's 0.01 by default.
      low: low percentile :math:`p_{low}` in [0, 100), default 5.
      high: high percentile :math:`p_{high}` in (low, 100], default 95.
      axis_name: optional mapped axis name(s) to gather the batch across.

    Returns:
      The updated averages.

    Raises:
      ValueError: for a rate outside (0, 1], percentiles not within
        0 <= low < high <= 100, or an ``axis_name`` no enclosing map binds.
      TypeError: for values that are not real numbers (complex ones
        included) or a mask that is not numbers.

    Example:
      >>> state = update_percentiles(init_percentiles(), jnp.arange(101.0), rate=0.5)
      >>> float(state.low), float(state.high)   # half of the 5th / 95th percentiles
      (2.5, 47.5)

    References:
      Hafner et al., `Mastering Diverse Domains through World Models
      <https://arxiv.org/abs/2301.04104>`_, 2023; DreamerV3
      ``embodied/jax/utils.py`` (``Normalize``, ``impl='perc'``).
    """
    dtype = _check_percentiles(state)
    rate = _check_update_options(rate, low, high, dtype)
    values = jnp.asarray(checks.check_reward("values", values), dtype)
    if mask is not None:
        mask = jnp.asarray(checks.check_flag("mask", mask), bool)
        if mask.shape != values.shape:
            raise ValueError(f"mask has shape {mask.shape}, expected {values.shape}.")
    return moved_percentiles(state, values, mask, rate, low, high, rs.check_axis_name(axis_name))


def moved_percentiles(state, values, mask, rate, low, high, axis_name) -> PercentileState:
    """:func:`update_percentiles` on checked inputs: the finite, masked-in values' percentiles."""
    valid = jnp.isfinite(values)
    if mask is not None:
        valid = valid & mask
    values = jnp.where(valid, values, jnp.nan)
    rs.participants(axis_name)  # an unbound axis_name is named before any collective
    names = () if axis_name is None else axis_name if isinstance(axis_name, tuple) else (axis_name,)
    for name in names:
        values = jax.lax.all_gather(values, name)
    if jnp.size(values):  # an empty batch (size known at trace time) leaves the state as it is
        # Quantiles of fractions divided on the host: jnp.nanpercentile divides by 100 in
        # the values' dtype, which costs float32 up to 3e-5 (JAX 0.10) or 2e-6 (JAX 0.12)
        # of the value range; this stays within 1.3e-6 of float64 percentiles on either.
        batch = jnp.nanquantile(values, jnp.asarray([low / 100, high / 100], values.dtype))
        new = PercentileState(
            low=(1.0 - rate) * state.low + rate * batch[0],
            high=(1.0 - rate) * state.high + rate * batch[1],
        )
        new = jax.tree.map(functools.partial(jnp.where, jnp.any(~jnp.isnan(values))), new, state)
    else:
        new = state
    if names:
        new = jax.tree.map(lambda x: jax.lax.pmax(x, names), new)
    return new


def percentile_scale(state: PercentileState, limit: base.Real = 1.0) -> jax.Array:
    r"""The divisor :math:`\max(\text{limit}, H - L)`.

    DreamerV3 divides advantages by it, ``(return - value) / scale``; the low
    percentile is not subtracted.

    Args:
      state: the averages from :func:`update_percentiles`.
      limit: lower bound of the divisor (1 in DreamerV3, so that small return
        ranges are not amplified).

    Raises:
      ValueError: if ``limit`` is not a positive number.

    Example:
      >>> returns = jnp.linspace(-40.0, 60.0, 1001)
      >>> state = update_percentiles(init_percentiles(), returns, rate=1.0)
      >>> advantages = returns - 10.0
      >>> round(float(percentile_scale(state)), 3)   # P95 - P5 = 55 - (-35)
      90.0
      >>> round(float((advantages / percentile_scale(state))[-1]), 4)
      0.5556
    """
    # limit <= 0 (or one that rounds to 0 in the state's dtype) allows a zero
    # or negative divisor.
    limit = checks.check_positive("limit", limit, _check_percentiles(state))
    return jnp.maximum(limit, state.high - state.low)


@dataclasses.dataclass(frozen=True)
class PercentileScaleRewardConfig(base.Config):
    """The options of :func:`percentile_scale_reward`, checked when it is built."""

    name: ClassVar[str] = "percentile_scale_reward"
    gamma: float = 0.99
    rate: float = 0.01
    low: float = 5.0
    high: float = 95.0
    limit: float = 1.0
    semantics: sem_lib.Semantics = sem_lib.GYMNASIUM
    dtype: Any = None
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})

    def __post_init__(self):
        dtype = rs.check_dtype(self.dtype)
        options = {
            "gamma": checks.check_gamma(self.gamma),
            "rate": _check_update_options(self.rate, self.low, self.high, dtype),
            "low": float(self.low),
            "high": float(self.high),
            "limit": checks.check_positive("limit", self.limit, dtype),
            "semantics": sem_lib.resolve(self.semantics),
            "dtype": dtype,
            "axis_name": rs.check_axis_name(self.axis_name),
        }
        for field, value in options.items():
            object.__setattr__(self, field, value)


def init(config: PercentileScaleRewardConfig, batch_shape: base.Shape):
    """Both averages at 0, and zero returns."""
    return PercentileScaleRewardState(
        percentiles=init_percentiles(config.dtype), ret=jnp.zeros(batch_shape, config.dtype)
    )


def apply(config: PercentileScaleRewardConfig, state, reward, task) -> jax.Array:
    r"""The rewards divided by the current scale, :math:`\max(\text{limit}, H - L)`."""
    scale = jnp.maximum(config.limit, state.percentiles.high - state.percentiles.low)
    return jnp.asarray(reward, config.dtype) / scale


def step(config: PercentileScaleRewardConfig, state, inputs: base.StepInputs):
    """Advance the returns, move the percentiles towards theirs, divide by the new scale."""

    def learn_returns(percentiles, ret, mask):
        low, high = config.low, config.high
        return moved_percentiles(percentiles, ret, mask, config.rate, low, high, config.axis_name)

    reward, ret, percentiles = norm_lib.return_step(
        state.ret,
        state.percentiles,
        inputs,
        gamma=config.gamma,
        semantics=config.semantics,
        dtype=config.dtype,
        learn_returns=learn_returns,
    )
    new_state = PercentileScaleRewardState(percentiles=percentiles, ret=ret)
    return apply(config, new_state, reward, None), new_state


def percentile_scale_reward(
    gamma: base.Real = 0.99,
    *,
    rate: base.Real = 0.01,
    low: base.Real = 5.0,
    high: base.Real = 95.0,
    limit: base.Real = 1.0,
    semantics: "str | sem_lib.Semantics" = "gymnasium",
    dtype=None,
    axis_name=None,
) -> base.RewardTransform:
    r"""Scales rewards by the moving percentile range of the discounted return.

    Each step advances every environment's discounted return as
    :func:`~rewardnorm_jax.normalize_reward` does (:doc:`/semantics` writes
    the recurrence out), moves the averages of the low and high percentiles
    towards those of the batch's returns (:func:`update_percentiles`), and
    divides the rewards by the scale, :func:`percentile_scale`.

    DreamerV3's return normalization moved to the reward: dividing every
    reward by a constant divides every return by it. The return recurrence,
    the reset flags, the freeze rule (``update_stats=False``) and the handling
    of non-finite rewards (left out, passed through) are those of
    :func:`~rewardnorm_jax.normalize_reward` with the same ``semantics``; its
    clip is not applied (the scaler divides by a range, it does not standardize).

    The percentiles are taken across the batch of environments at each step,
    so the transform needs many environments: with one environment the range
    is 0 and the scale stays 1. For a single stream, or to follow DreamerV3
    exactly, call :func:`update_percentiles` on a whole rollout of returns
    (all time steps and environments) and divide advantages by
    :func:`percentile_scale`.

    Args:
      gamma: discount factor in [0, 1].
      rate: moving-average rate :math:`\alpha \in (0, 1]` (0.01).
      low: low percentile (5).
      high: high percentile (95).
      limit: lower bound of the divisor (1).
      semantics: reset conventions, as for :func:`~rewardnorm_jax.normalize_reward`.
      dtype: float32 or float64 for the state and the output.
      axis_name: mapped axis name(s): the returns of every participant are
        gathered (see :func:`update_percentiles` for the cost).

    Returns:
      A :class:`~rewardnorm_jax.RewardTransform` with state
      :class:`PercentileScaleRewardState`.

    Raises:
      ValueError: for gamma outside [0, 1], a rate outside (0, 1], percentiles
        not within 0 <= low < high <= 100, a non-positive limit or an unknown
        semantics.

    Example:
      >>> t = percentile_scale_reward(gamma=0.0, rate=1.0)
      >>> state = t.init(batch_shape=(101,))
      >>> reward, state = t.step(state, jnp.arange(101.0))
      >>> round(float(reward[-1]), 4)   # 100 / (95 - 5)
      1.1111

    References:
      Hafner et al., `Mastering Diverse Domains through World Models
      <https://arxiv.org/abs/2301.04104>`_, 2023.
    """
    config = PercentileScaleRewardConfig.checked(
        gamma, rate, low, high, limit, semantics, dtype, axis_name
    )
    return builder.make_transform(config, init, apply, step)
