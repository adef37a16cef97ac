"""Where each answer's group is: contiguous groups, ragged ids, or the whole batch.

A layout holds per-answer values as it groups them (``grouped`` / ``flat``),
reduces them to per-group totals (``sums``), and reads per-group values back
at the answers (``rows``, broadcastable against the grouped values). With an
``axis_name``, the totals of a group whose answers sit on several devices are
reduced across that axis, so that every device sees the whole group's totals:

* :class:`Contiguous`: answers ``[k G, (k + 1) G)`` form group ``k`` (Tunix,
  OpenRLHF). Every group lies on one device, so nothing crosses devices.
* :class:`Ragged`: integer ids in ``[0, num_groups)``, in any order, some
  unused (verl's ``uid``, dynamic sampling). With an ``axis_name``, an id
  names the same group on every device.
* :class:`Whole`: the batch as one group (batch statistics), over every
  device of the ``axis_name``.

Values may carry trailing axes (one per reward function), grouped alike.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

ONE_PASS_LIMIT = 16
"""The largest groups whose shifted sums are accurate without a re-centring pass (see moments)."""
BLOCK = 128
"""Sums run over blocks of at most this many answers, then over the blocks: a reduction adds
its entries one after another, so its rounding error grows with their number."""


@dataclasses.dataclass(frozen=True)
class Contiguous:
    """Groups of ``size`` consecutive answers, each on one device.

    Values are held grouped, ``(P, size, ...)``: every per-answer expression
    then reads its group's totals as a broadcast, and the compiler fuses it
    into the loop that reads the values, where a flat ``(P size,)`` layout
    would make it store the shifted values between the passes.
    """

    size: int

    @property
    def one_pass(self) -> bool:
        """Whether the groups are small enough for one pass of shifted sums."""
        return self.size <= ONE_PASS_LIMIT

    def grouped(self, values: jax.Array) -> jax.Array:
        """``(B, ...)`` per-answer values as ``(P, size, ...)``."""
        return values.reshape(-1, self.size, *values.shape[1:])

    def flat(self, values: jax.Array) -> jax.Array:
        """The inverse of :meth:`grouped`."""
        return values.reshape(-1, *values.shape[2:])

    def sums(self, *values: jax.Array) -> tuple[jax.Array, ...]:
        """Each group's sum of each of ``values``, in one pass."""
        return _sums(values, axis=1)

    def answers(self, values: jax.Array) -> jax.Array:
        """Each group's number of answers, valid or not."""
        return jnp.full(values.shape[:1] + values.shape[2:], self.size, values.dtype)

    def reference(self, values: jax.Array, valid: jax.Array) -> jax.Array:
        """A valid value of each group (0 for a group without one)."""
        # Any valid value: a reduction that keeps a valid operand returns one whatever
        # order the compiler reduces in, at the cost of one sum.
        zero = jnp.zeros((), values.dtype)
        return jax.lax.reduce((valid, values), (False, zero), _keep_valid, (1,))[1]

    def reference_and_magnitude(self, values: jax.Array, valid: jax.Array):
        """:meth:`reference`, and each group's largest valid ``|x|`` (0 for none), in one pass."""
        zero = jnp.zeros((), values.dtype)
        magnitudes = jnp.where(valid, jnp.abs(values), zero)
        reduced = jax.lax.reduce(
            (valid, values, magnitudes), (False, zero, zero), _keep_valid_and_max, (1,)
        )
        return reduced[1], reduced[2]

    def largest(self, values: jax.Array, valid: jax.Array) -> jax.Array:
        """Each group's largest valid value (``-inf`` for a group without one)."""
        return jnp.max(jnp.where(valid, values, -jnp.inf), axis=1)

    def rows(self, per_group: jax.Array) -> jax.Array:
        """``per_group`` broadcastable against the grouped values."""
        return per_group[:, None]


class _LargestAsReference:
    """A layout whose reference value is each group's largest valid value (by ``largest``)."""

    def reference(self, values: jax.Array, valid: jax.Array) -> jax.Array:
        """Each group's largest valid value, the same on every device (0 for none)."""
        largest = self.largest(values, valid)  # type: ignore[attr-defined]
        return jnp.where(jnp.isfinite(largest), largest, 0)

    def reference_and_magnitude(self, values: jax.Array, valid: jax.Array):
        """:meth:`reference`, and each group's largest valid ``|x|`` (0 for none)."""
        return self.reference(values, valid), self.reference(jnp.abs(values), valid)


@dataclasses.dataclass(frozen=True)
class Ragged(_LargestAsReference):
    """Groups named by integer ids in ``[0, num_groups)``; ids out of range belong to none.

    The caller checks the ids: an id outside ``[0, num_groups)`` is dropped
    from every total, and ``rows`` gives it NaN (False for a flag). A group's
    sums add its answers one after another, so their rounding grows with the
    group's size (about its number of answers in ulps, before the re-centring
    pass of the moments divides it out to first order).
    """

    ids: jax.Array
    num_groups: int
    axis_name: Any = None  # set where a group's answers may sit on several devices

    one_pass = False  # a group may hold any number of answers

    def grouped(self, values: jax.Array) -> jax.Array:
        """The values as they are: one per answer."""
        return values

    flat = grouped

    def sums(self, *values: jax.Array) -> tuple[jax.Array, ...]:
        """Each group's sum of each of ``values``, over every device of ``axis_name``."""
        keys = jnp.where(self._known(), self.ids, -1)
        totals = tuple(jax.ops.segment_sum(value, keys, self.num_groups) for value in values)
        return totals if self.axis_name is None else jax.lax.psum(totals, self.axis_name)

    def answers(self, values: jax.Array) -> jax.Array:
        """Each group's number of answers, valid or not."""
        return self.sums(jnp.ones_like(values))[0]

    def largest(self, values: jax.Array, valid: jax.Array) -> jax.Array:
        """Each group's largest valid value, the same on every device (``-inf`` for none)."""
        largest = jax.ops.segment_max(jnp.where(valid, values, -jnp.inf), self.ids, self.num_groups)
        if self.axis_name is not None:  # one value for every device
            largest = jax.lax.pmax(largest, self.axis_name)
        return largest

    def rows(self, per_group: jax.Array) -> jax.Array:
        """Each answer's entry of ``per_group``; NaN (False) for an id out of range."""
        fill = False if per_group.dtype == jnp.bool_ else jnp.nan
        known = self._known().reshape(-1, *(1,) * (per_group.ndim - 1))
        return jnp.where(known, per_group[jnp.clip(self.ids, 0, self.num_groups - 1)], fill)

    def _known(self) -> jax.Array:
        return (self.ids >= 0) & (self.ids < self.num_groups)


@dataclasses.dataclass(frozen=True)
class Whole(_LargestAsReference):
    """The batch as one group: on every device of ``axis_name`` together, if it is set."""

    axis_name: Any = None

    one_pass = False  # the batch may hold any number of answers

    def grouped(self, values: jax.Array) -> jax.Array:
        """The values as they are: one per answer."""
        return values

    flat = grouped

    def sums(self, *values: jax.Array) -> tuple[jax.Array, ...]:
        """The batch's sum of each of ``values``, shape ``(1, ...)``, over every device."""
        totals = tuple(total[None] for total in _sums(values, axis=0))
        return totals if self.axis_name is None else jax.lax.psum(totals, self.axis_name)

    def largest(self, values: jax.Array, valid: jax.Array) -> jax.Array:
        """The batch's largest valid value, shape ``(1, ...)``, the same on every device."""
        largest = jnp.where(valid, values, -jnp.inf).max(axis=0, keepdims=True, initial=-jnp.inf)
        if self.axis_name is not None:  # one value for every device
            largest = jax.lax.pmax(largest, self.axis_name)
        return largest

    def rows(self, per_group: jax.Array) -> jax.Array:
        """The batch's entry, broadcastable against every answer."""
        return per_group[0]


def _sums(values: tuple[jax.Array, ...], axis: int) -> tuple[jax.Array, ...]:
    """The sums of ``values`` along ``axis``, by one variadic reduction per block of answers."""
    size: Any = values[0].shape[axis]  # symbolic under jax.export
    zeros = tuple(jnp.zeros((), value.dtype) for value in values)
    if not isinstance(size, int) or size <= BLOCK:  # a symbolic batch (jax.export): one pass
        return tuple(jax.lax.reduce(values, zeros, _add, (axis,)))
    padding = [(0, 0)] * values[0].ndim
    padding[axis] = (0, -size % BLOCK)
    blocked = tuple(
        jnp.pad(value, padding).reshape(*value.shape[:axis], -1, BLOCK, *value.shape[axis + 1 :])
        for value in values
    )
    return tuple(
        total.sum(axis=axis) for total in jax.lax.reduce(blocked, zeros, _add, (axis + 1,))
    )


def _add(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _keep_valid(a: tuple, b: tuple) -> tuple:
    return a[0] | b[0], jnp.where(a[0], a[1], b[1])


def _keep_valid_and_max(a: tuple, b: tuple) -> tuple:
    return (*_keep_valid(a[:2], b[:2]), jnp.maximum(a[2], b[2]))
