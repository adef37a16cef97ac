"""Transform states as checkpoint bytes: msgpack through ``flax.serialization``.

A checkpoint is a msgpack map ``{"format": "rewardnorm_jax.state", "crc32":
..., "body": ...}`` whose ``body`` (checked by the CRC-32) is the msgpack map:

* ``version`` (2; version 1 is read too, see :func:`load_state`);
* ``static``: the static (non-array) fields of the state's dataclasses, such
  as the ``decay`` of exponential moving statistics, by path;
* ``metadata``: what the caller passed to :func:`save_state` (for example the
  semantics and hyperparameters of the transform, which the state itself
  does not record);
* ``state``: ``flax.serialization.to_state_dict(state)``.

Loading parses data only (msgpack and raw array buffers, never pickle), so a
checkpoint cannot run code, and it checks everything against a template
state before restoring: nothing is broadcast or cast silently.
"""

import dataclasses
import math
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from rewardnorm_jax._src import running_stats as rs
from rewardnorm_jax._src.normalize import NormalizeRewardState
from rewardnorm_jax._src.percentile import PercentileScaleRewardState, PercentileState

FORMAT = "rewardnorm_jax.state"
VERSION = 2
# Version 1 stored RunningStats as one leaf per quantity; version 2 packs them.
_V1_FLOATS = ("mean", "mean_low", "m2", "m2_low")
_V1_WORDS = ("count_hi", "count_lo")
_SCALARS = (bool, int, float, str, type(None))
_MAX_LISTED = 12  # differences listed in an error message


def _static_fields(tree, path: str = "") -> dict[str, Any]:
    """Non-pytree dataclass fields (e.g. ``RunningStats.decay``) by path."""
    found = {}
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        for field in dataclasses.fields(tree):
            value = getattr(tree, field.name)
            if field.metadata.get("pytree_node", True):
                found.update(_static_fields(value, f"{path}{field.name}/"))
            else:
                found[path + field.name] = value if isinstance(value, _SCALARS) else repr(value)
    elif isinstance(tree, (tuple, list)):
        for i, value in enumerate(tree):
            found.update(_static_fields(value, f"{path}{i}/"))
    elif isinstance(tree, dict):
        for key, value in tree.items():
            found.update(_static_fields(value, f"{path}{key}/"))
    return found


def _describe(leaf) -> str:
    if isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
        return f"{np.dtype(leaf.dtype).name}{list(np.shape(leaf))}"
    if isinstance(leaf, dict):  # an empty sub-state, e.g. EmptyState
        return "{}"
    return type(leaf).__name__


def _flatten(state_dict, path: str = "") -> dict[str, str]:
    """``{path: "dtype[shape]" or type name}`` of a state dict's leaves."""
    if isinstance(state_dict, dict) and state_dict:
        flat = {}
        for key, value in state_dict.items():
            flat.update(_flatten(value, f"{path}{key}/"))
        return flat
    return {path.rstrip("/") or "<root>": _describe(state_dict)}


def _same(saved, expected) -> bool:
    """Equal metadata values: NaN equals NaN, and a bool never equals a number."""
    if isinstance(saved, bool) != isinstance(expected, bool):
        return False
    if isinstance(saved, float) and isinstance(expected, float):
        return saved == expected or (math.isnan(saved) and math.isnan(expected))
    return saved == expected


def _compare(kind: str, saved: Mapping, expected: Mapping) -> list[str]:
    lines = []
    for key in sorted(set(saved) | set(expected), key=str):
        if key not in expected:
            lines.append(f"{kind} {key!r}: in the checkpoint ({saved[key]!r}), not expected")
        elif key not in saved:
            lines.append(f"{kind} {key!r}: expected {expected[key]!r}, not in the checkpoint")
        elif not _same(saved[key], expected[key]):
            lines.append(
                f"{kind} {key!r}: checkpoint has {saved[key]!r}, expected {expected[key]!r}"
            )
    return lines


def _check_metadata(metadata) -> dict[str, Any]:
    metadata = {} if metadata is None else dict(metadata)
    for key, value in metadata.items():
        if not (isinstance(key, str) and isinstance(value, _SCALARS)):
            raise ValueError(
                f"metadata should map strings to bool, int, float, str or None, got "
                f"{key!r}: {value!r}."
            )
    return metadata


def _read_record(body: bytes) -> dict[str, Any]:
    """The checkpoint's record, with the types ``load_state`` relies on checked."""
    try:
        record = serialization.msgpack_restore(body)
    except Exception as error:
        raise ValueError(f"checkpoint body is not msgpack: {error}") from error
    if not isinstance(record, dict):
        raise ValueError(f"checkpoint body is a {type(record).__name__}, not a record.")
    version = record.get("version")
    if type(version) is not int or version not in (1, VERSION):
        raise ValueError(
            f"checkpoint format version {version!r} is not supported "
            f"(this library reads versions 1 and {VERSION})."
        )
    if "state" not in record:
        raise ValueError("checkpoint record holds no 'state'.")
    for key in ("static", "metadata"):
        if not isinstance(record.get(key), dict):
            raise ValueError(f"checkpoint record has no {key!r} mapping.")
    return record


def _pack_v1_stats(tree):
    """A version-1 state dict with every RunningStats in the packed layout.

    Version 1 kept ``mean``, ``mean_low``, ``m2``, ``m2_low`` (and ``weight``)
    and the count words ``count_hi``, ``count_lo`` as separate leaves; they
    are stacked along a new last axis into ``moments`` and ``count_words``,
    bit for bit. A record that does not hold them consistently (one shape,
    one float dtype, uint32 words) is left as it is, and the comparison with
    the template then names its leaves.
    """
    if not isinstance(tree, dict):
        return tree
    tree = {key: _pack_v1_stats(value) for key, value in tree.items()}
    names = (*_V1_FLOATS, *_V1_WORDS)
    if set(names) <= set(tree) <= {*names, "weight"}:
        floats = [tree[name] for name in _V1_FLOATS]
        if tree.get("weight") is not None:
            floats.append(tree["weight"])
        words = [tree[name] for name in _V1_WORDS]
        leaves = floats + words
        if all(isinstance(leaf, np.ndarray) for leaf in leaves) and (
            len({leaf.shape for leaf in leaves}) == 1
            and len({leaf.dtype for leaf in floats}) == 1
            and floats[0].dtype.kind == "f"
            and all(word.dtype == np.uint32 for word in words)
        ):
            return {"moments": np.stack(floats, axis=-1), "count_words": np.stack(words, axis=-1)}
    return tree


def _refuse_where(name: str, values, bad, expected: str) -> None:
    """Raises a ValueError naming ``name`` and its first value where ``bad`` holds."""
    values, bad = np.asarray(values), np.asarray(bad)
    if np.any(bad):
        value = np.broadcast_to(values, bad.shape)[bad].flat[0].item()
        raise ValueError(f"{name} holds {value!r}; expected {expected}.")


def check_stats_values(stats: rs.RunningStats, name: str = "stats") -> None:
    r"""Raises a ValueError unless ``stats`` holds values a merge can produce.

    The mean and the rounding-error terms are finite, :math:`M` is in
    :math:`[0, +\infty]` (``+inf`` once saturated, never NaN) and so is
    :math:`M` with its rounding error, ``m2 + m2_low`` (the variance's
    numerator: a negative one makes the divisor NaN), and the weight of
    exponential moving statistics is positive and finite. Any count is one
    some number of updates reaches.

    Example:
      >>> stats = rs.init_stats()
      >>> check_stats_values(stats.replace(moments=jnp.array([0.0, 0.0, -1.0, 0.0])))
      Traceback (most recent call last):
      ...
      ValueError: stats.m2 holds -1.0; expected M >= 0 (+inf when saturated).
    """
    rules: list[tuple[str, Callable[[np.ndarray], np.ndarray], str]] = [
        ("mean", np.isfinite, "a finite mean"),
        ("mean_low", np.isfinite, "a finite rounding error"),
        ("m2", lambda m2: m2 >= 0, "M >= 0 (+inf when saturated)"),
        ("m2_low", np.isfinite, "a finite rounding error"),
    ]
    if stats.weight is not None:
        rules.append(("weight", lambda w: np.isfinite(w) & (w > 0), "a positive, finite weight"))
    for field, rule, expected in rules:
        values = np.asarray(getattr(stats, field))
        _refuse_where(f"{name}.{field}", values, ~rule(values), expected)
    m2, m2_low = np.asarray(stats.m2), np.asarray(stats.m2_low)
    with np.errstate(over="ignore"):
        total = m2 + m2_low  # in the statistics dtype, as the variance is computed
    _refuse_where(
        f"{name}.m2_low",
        m2_low,
        ~(total >= 0),
        f"a rounding error that keeps m2 + m2_low >= 0 (m2 is {m2.flat[0].item()!r} there)"
        if m2.size == 1
        else "a rounding error that keeps m2 + m2_low >= 0",
    )


def check_return(ret, name: str = "ret") -> None:
    """Raises a ValueError if a tracked discounted return is NaN.

    A step never makes the return NaN: non-finite rewards are left out of it.
    It can overflow to ``+-inf`` (returns beyond the dtype's range), which
    saturates the statistics as it does in a run, so infinities load.
    """
    values = np.asarray(ret)
    _refuse_where(
        name, values, np.isnan(values), "a return that is not NaN (+-inf once overflowed)"
    )


def _check_normalize_reward_state(state: NormalizeRewardState, name: str) -> None:
    """The return and the running maximum of ``|G|`` of ``g_max``, in ``[0, +inf]``."""
    check_return(state.ret, f"{name}.ret")
    if state.ret_abs_max is not None:
        values = np.asarray(state.ret_abs_max)
        _refuse_where(
            f"{name}.ret_abs_max",
            values,
            ~(values >= 0),
            "a running maximum of |G| >= 0 (+inf once a return overflowed), never NaN",
        )


def _check_percentile_scale_reward_state(state: PercentileScaleRewardState, name: str) -> None:
    check_return(state.ret, f"{name}.ret")


def _check_percentile_state(state: PercentileState, name: str) -> None:
    """Finite averages, the low one at most the high one (every update keeps that order)."""
    low, high = np.asarray(state.low), np.asarray(state.high)
    _refuse_where(f"{name}.low", low, ~np.isfinite(low), "a finite moving percentile")
    _refuse_where(f"{name}.high", high, ~np.isfinite(high), "a finite moving percentile")
    _refuse_where(
        f"{name}.low",
        low,
        ~(low <= high),
        f"a low percentile <= the high one ({name}.high holds {high.flat[0].item()!r})"
        if high.size == 1
        else "a low percentile <= the high one",
    )


# What every state type load_state restores may hold: a check of its own fields
# (the states nested in it are checked by their own entries).
_VALUE_CHECKS: dict[type, Callable[[Any, str], None]] = {
    rs.RunningStats: check_stats_values,
    NormalizeRewardState: _check_normalize_reward_state,
    PercentileScaleRewardState: _check_percentile_scale_reward_state,
    PercentileState: _check_percentile_state,
}


def check_values(state) -> None:
    """Checks every state of a known type in ``state`` (:data:`_VALUE_CHECKS`), named by path.

    The other leaves (``CheckFiniteRewardState.step``, any count word, the
    arrays of an arbitrary pytree) hold no value a run cannot reach.
    """
    for kind, check in _VALUE_CHECKS.items():

        def is_kind(node, kind=kind) -> bool:
            return isinstance(node, kind)

        for path, node in jax.tree_util.tree_flatten_with_path(state, is_leaf=is_kind)[0]:
            if is_kind(node):
                check(node, "state" + jax.tree_util.keystr(path))


# Options of ``normalize_reward`` added after format version 2 began, at the values
# that checkpoints saved before them hold: one scalar stream per environment.
_ADDED_OPTIONS = {"components": 0, "num_tasks": None, "episodic": True}


def _with_added_options(metadata: dict[str, Any], version: int) -> dict[str, Any]:
    """Metadata with the options added since it was saved, at the values it implied.

    A ``normalize_reward`` config of version 1 has no ``finite_rewards``: its
    normalizers handled non-finite rewards, so it is ``False``. Configs saved
    before the reward streams have no ``components``, ``num_tasks`` or
    ``episodic``: they are one scalar, episodic stream.
    """
    metadata = dict(metadata)
    for key, value in list(metadata.items()):
        if key.endswith("transform") and value == "normalize_reward":
            prefix = key[: -len("transform")]
            added = _ADDED_OPTIONS | ({"finite_rewards": False} if version == 1 else {})
            for option, default in added.items():
                metadata.setdefault(prefix + option, default)
    return metadata


# State fields that older checkpoints hold and states no longer keep: the task ids of a
# keyed normalize_reward, now an input of every step.
_REMOVED_FIELDS = frozenset({"task"})


def _with_current_fields(saved, expected):
    """``saved`` with the fields states no longer keep dropped, and those added since as None.

    A field added since is one that is ``None`` in ``expected`` and absent from ``saved``.
    """
    if not (isinstance(saved, dict) and isinstance(expected, dict)):
        return saved
    filled = {
        key: _with_current_fields(value, expected.get(key))
        for key, value in saved.items()
        if key in expected or key not in _REMOVED_FIELDS
    }
    for key, value in expected.items():
        if value is None and key not in saved:
            filled[key] = None
    return filled


# Static fields added after format version 2 began, at the values older states held.
_ADDED_STATIC = {"step_size": None}  # RunningStats: cumulative or exponential moving


def _with_added_static(saved: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """Saved static fields with those added since (``RunningStats.step_size``) filled in."""
    filled = dict(saved)
    for path in expected:
        prefix, _, name = path.rpartition("/")
        of_stats = (f"{prefix}/" if prefix else "") + "decay" in expected  # a RunningStats
        if name in _ADDED_STATIC and of_stats and path not in saved:
            filled[path] = _ADDED_STATIC[name]
    return filled


def save_state(state, metadata: Mapping[str, Any] | None = None) -> bytes:
    """Serializes a transform state (any pytree of arrays) to msgpack bytes.

    Args:
      state: the state, e.g. from ``normalize_reward(...).init(...)`` and
        ``step``; any pytree ``flax.serialization`` handles (flax dataclasses,
        NamedTuples, tuples, dicts) of arrays, Python numbers or ``None``.
      metadata: optional ``{str: bool | int | float | str | None}`` stored in
        the header and checked by :func:`load_state`, for what the state does
        not record: usually the transform's ``config`` (its semantics,
        ``gamma``, ``epsilon``...).

    Returns:
      The checkpoint bytes; the arrays are stored bit-exactly.

    Example:
      >>> import rewardnorm_jax as rn
      >>> norm = rn.normalize_reward(semantics="sb3")
      >>> state = norm.update(norm.init((2,)), jnp.array([1.0, 2.0]))
      >>> data = save_state(state, norm.config)
      >>> restored = load_state(norm.init((2,)), data, norm.config)
      >>> float(restored.stats.mean) == float(state.stats.mean)
      True
      >>> other = rn.normalize_reward()   # Gymnasium semantics
      >>> load_state(other.init((2,)), data, other.config)
      Traceback (most recent call last):
      ...
      ValueError: checkpoint does not match the template (leaves as dtype[shape]):
        metadata 'clip': checkpoint has 10.0, expected None
        metadata 'freeze_stops_return': checkpoint has True, expected False
        metadata 'reset_after': checkpoint has 'done', expected 'never'
        metadata 'reset_before': checkpoint has 'never', expected 'terminated'
        metadata 'semantics': checkpoint has 'sb3', expected 'gymnasium'
    """
    body = serialization.msgpack_serialize(
        {
            "version": VERSION,
            "static": _static_fields(state),
            "metadata": _check_metadata(metadata),
            "state": serialization.to_state_dict(state),
        }
    )
    return serialization.msgpack_serialize(
        {"format": FORMAT, "crc32": zlib.crc32(body), "body": body}
    )


def load_state(template, data: bytes, metadata: Mapping[str, Any] | None = None):
    """Restores a state saved by :func:`save_state`, checked against ``template``.

    Args:
      template: a state of the expected structure, shapes and dtypes, e.g.
        ``norm.init(batch_shape)`` of the transform the state belongs to.
      data: bytes from :func:`save_state`.
      metadata: the metadata the checkpoint must hold (usually the
        transform's ``config``), or ``None`` to accept any.

    Checkpoints of format version 1 (rewardnorm_jax 0.1.0, which stored each
    quantity of :class:`~rewardnorm_jax.RunningStats` as its own leaf) are
    migrated to the packed layout on loading, bit for bit, and their
    metadata gains the options added since at the values version 1 implied
    (``finite_rewards=False``). Checkpoints saved before the reward streams
    load as one scalar, episodic stream (``components=0``, ``num_tasks=None``,
    ``episodic=True``). The task ids that keyed states of earlier versions
    held (field ``task``) are dropped on loading: ids are an input of every
    step.

    Returns:
      A state like ``template`` holding the saved values bit-exactly, with
      JAX arrays where the template has JAX arrays (NumPy arrays and Python
      numbers stay as they are).

    Raises:
      ValueError: if ``data`` is truncated, corrupt (checksum) or not such a
        checkpoint, or if its structure, shapes, dtypes, static fields or
        metadata differ from the template's (the message lists every
        difference by path), or if it holds values no step produces, named
        by path: statistics (:func:`check_stats_values`), a NaN return, a
        negative or NaN running maximum of ``|G|`` (``g_max``), or moving
        percentiles that are not finite or not ordered (low <= high).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data should be the bytes from save_state, got {type(data).__name__}.")
    data = bytes(data)
    try:
        envelope = serialization.msgpack_restore(data)
    except Exception as error:  # msgpack reports truncation in several types
        raise ValueError(
            f"checkpoint data ({len(data)} bytes) is truncated or not msgpack: {error}"
        ) from error
    if not (isinstance(envelope, dict) and envelope.get("format") == FORMAT):
        raise ValueError(f"data is not a {FORMAT!r} checkpoint (no such format header).")
    body = envelope.get("body")
    if not isinstance(body, bytes) or zlib.crc32(body) != envelope.get("crc32"):
        raise ValueError("checkpoint is corrupt: its body does not match its crc32 checksum.")
    record = _read_record(body)
    saved = record["state"]
    if record["version"] == 1:
        saved = _pack_v1_stats(saved)
    record["metadata"] = _with_added_options(record["metadata"], record["version"])
    expected = serialization.to_state_dict(template)
    saved = _with_current_fields(saved, expected)

    differences = _compare("leaf", _flatten(saved), _flatten(expected))
    template_static = _static_fields(template)
    saved_static = _with_added_static(record["static"], template_static)
    differences += _compare("static field", saved_static, template_static)
    if metadata is not None:
        differences += _compare("metadata", record["metadata"], _check_metadata(metadata))
    if differences:
        shown = differences[:_MAX_LISTED] + [f"... and {len(differences) - _MAX_LISTED} more"] * (
            len(differences) > _MAX_LISTED
        )
        raise ValueError(
            "checkpoint does not match the template (leaves as dtype[shape]):\n  "
            + "\n  ".join(shown)
        )
    state = serialization.from_state_dict(template, saved)
    check_values(state)
    return jax.tree.map(
        lambda like, value: jnp.asarray(value) if isinstance(like, jax.Array) else value,
        template,
        state,
    )
