"""A reward stream fed to a transform: the one ``lax.scan`` over ``step`` that the tests share."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import rewardnorm_jax as rn


def scan_steps(
    transform: rn.RewardTransform,
    rewards: jax.Array,
    terminated: Any = False,
    truncated: Any = False,
    update_stats: Any = True,
    active: jax.Array | None = None,
    *,
    state: Any = None,
    record: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any]:
    """``(state, outputs)``: ``transform.step`` over the leading (time) axis, in one ``lax.scan``.

    Args:
      transform: the transform to step.
      rewards: ``(T, *batch)`` rewards.
      terminated: ``(T, *batch)`` or ``(T,)`` flags per step, or one flag for all.
      truncated: as ``terminated``.
      update_stats: ``(T,)`` flags per step, or one flag for all.
      active: ``(T, *batch)`` flags per step, or ``None`` (no ``active`` argument).
      state: the state to start from; default ``transform.init(batch)``.
      record: a function of the state after each step, whose values are returned
        beside the outputs: ``outputs`` is then ``(rewards, records)``.
    """
    # A scalar stays out of the scanned inputs: a Python bool stays static, as
    # a caller's own loop would pass it (``update_stats=True`` compiles the
    # step without the freeze mask).
    per_step = [None if jnp.ndim(x) == 0 else x for x in (terminated, truncated, update_stats)]
    fixed = (terminated, truncated, update_stats)

    def body(state, xs):
        reward, flags, act = xs
        term, trunc, update = (f if x is None else x for f, x in zip(fixed, flags, strict=True))
        out, state = transform.step(state, reward, term, trunc, update, active=act)
        return state, out if record is None else (out, record(state))

    start = transform.init(rewards.shape[1:]) if state is None else state
    return jax.lax.scan(body, start, (rewards, per_step, active))


jit_scan_steps = jax.jit(scan_steps, static_argnames=("transform", "record"))
""":func:`scan_steps` under ``jax.jit``, the transform static."""
