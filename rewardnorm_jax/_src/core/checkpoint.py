"""Transform states as checkpoint bytes: msgpack through ``flax.serialization``.

A checkpoint is a msgpack map ``{"format": "rewardnorm_jax.state", "crc32":
..., "body": ...}`` whose ``body`` (checked by the CRC-32) is the msgpack map:

* ``version`` (3; versions 1 and 2 are read too, through
  :mod:`~rewardnorm_jax._src.core.checkpoint_migration`);
* ``layout``: what the file holds, by path: each container's type
  (``NormalizeRewardState``, ``RunningStats``) and each array's
  ``dtype[shape]``, so a file describes itself to a reader without a template;
* ``static``: the static (non-array) fields of the state's dataclasses, such
  as the ``decay`` of exponential moving statistics, by path;
* ``metadata``: what the caller passed to :func:`save_state`, usually the
  transform's configuration, flattened (``Config.metadata()``: the options
  the state itself does not record);
* ``state``: ``flax.serialization.to_state_dict(state)``.

Nothing here names a transform: the values a state may hold are checked by
the state's own ``check_values`` (:mod:`~rewardnorm_jax._src.core.state_fields`).

Loading parses data only (msgpack and raw array buffers, never pickle), so a
checkpoint cannot run code, and it checks everything against a template
state before restoring: nothing is broadcast or cast silently.
"""

import dataclasses
import math
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from rewardnorm_jax._src.core import checkpoint_migration, checks, state_fields
from rewardnorm_jax._src.core.base import Config

FORMAT = "rewardnorm_jax.state"
VERSION = 3
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
    if isinstance(metadata, Config):
        metadata = metadata.metadata()
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
    if type(version) is not int or not 1 <= version <= VERSION:
        raise ValueError(
            f"checkpoint format version {version!r} is not supported "
            f"(this library reads versions 1 to {VERSION})."
        )
    if "state" not in record:
        raise ValueError("checkpoint record holds no 'state'.")
    for key in ("static", "metadata"):
        if not isinstance(record.get(key), dict):
            raise ValueError(f"checkpoint record has no {key!r} mapping.")
    if "layout" in record and not isinstance(record["layout"], dict):  # version 3 has one
        raise ValueError(
            f"checkpoint record's 'layout' is a {type(record['layout']).__name__}, not a mapping "
            "of paths to types and dtype[shape]."
        )
    return record


def _types(layout: Mapping) -> dict[str, str]:
    """The container types of a :func:`~rewardnorm_jax._src.core.checks.layout`, by path."""
    return {
        path: kind
        for path, kind in layout.items()
        if isinstance(kind, str) and kind.isidentifier() and kind != "None"
    }


def save_state(state, metadata: Config | Mapping[str, Any] | None = None) -> bytes:
    """Serializes a transform state (any pytree of arrays) to msgpack bytes.

    Args:
      state: the state, e.g. from ``normalize_reward(...).init(...)`` and
        ``step``; any pytree ``flax.serialization`` handles (flax dataclasses,
        NamedTuples, tuples, dicts) of arrays, Python numbers or ``None``.
      metadata: optional: the transform's ``config`` (stored flattened, by
        its ``metadata()``: its semantics, ``gamma``, ``epsilon``...), or any
        ``{str: bool | int | float | str | None}``; stored in the header and
        checked by :func:`load_state`, for what the state does not record.

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
        metadata 'semantics/clip': checkpoint has 10.0, expected None
        metadata 'semantics/freeze_stops_return': checkpoint has True, expected False
        metadata 'semantics/name': checkpoint has 'sb3', expected 'gymnasium'
        metadata 'semantics/reset_after': checkpoint has 'done', expected 'never'
        metadata 'semantics/reset_before': checkpoint has 'never', expected 'terminated'
    """
    body = serialization.msgpack_serialize(
        {
            "version": VERSION,
            "layout": checks.layout(state),
            "static": _static_fields(state),
            "metadata": _check_metadata(metadata),
            "state": serialization.to_state_dict(state),
        }
    )
    return serialization.msgpack_serialize(
        {"format": FORMAT, "crc32": zlib.crc32(body), "body": body}
    )


def load_state(template, data: bytes, metadata: Config | Mapping[str, Any] | None = None):
    """Restores a state saved by :func:`save_state`, checked against ``template``.

    Args:
      template: a state of the expected structure, shapes and dtypes, e.g.
        ``norm.init(batch_shape)`` of the transform the state belongs to.
      data: bytes from :func:`save_state`.
      metadata: the metadata the checkpoint must hold (usually the
        transform's ``config``), or ``None`` to accept any.

    Checkpoints of earlier format versions load through
    :mod:`~rewardnorm_jax._src.core.checkpoint_migration`: version 1
    (rewardnorm_jax 0.1.0, which stored each quantity of
    :class:`~rewardnorm_jax.RunningStats` as its own leaf) is packed, bit for
    bit; the flat options of versions 1 and 2 (``shared``, ``decay``,
    ``clip``, ``episodic``...) are renamed to the nested configuration's
    (``statistics/per_env``, ``statistics/decay``, ``semantics/clip``, the
    ``non_episodic`` semantics), options added since take the values the
    file implied (one scalar, episodic stream; ``finite_rewards=False`` for
    version 1), and the task ids that keyed states held (field ``task``)
    are dropped: ids are an input of every step. Static fields and options
    added since (an observation state's ``per_env`` and ``num_tasks``,
    ``normalize_observation``'s ``epsilon_on`` and ``until_count``,
    ``group_advantages``' levels) take the values that gave the saved arithmetic.

    Returns:
      A state like ``template`` holding the saved values bit-exactly, with
      JAX arrays where the template has JAX arrays (NumPy arrays and Python
      numbers stay as they are).

    Raises:
      ValueError: if ``data`` is truncated, corrupt (checksum) or not such a
        checkpoint, or if its structure, shapes, dtypes, static fields or
        metadata differ from the template's (the message lists every
        difference by path), or if it holds values no step produces, named
        by path: statistics (``RunningStats.check_values``), a NaN return, a
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
    expected = serialization.to_state_dict(template)
    template_static = _static_fields(template)
    record = checkpoint_migration.migrate(_read_record(body), expected, template_static)
    saved = record["state"]

    wanted = checks.layout(template)
    differences = _compare("leaf", _flatten(saved), _flatten(expected))
    if "layout" in record:  # the state types, which the state dict leaves out
        differences += _compare("type", _types(record["layout"]), _types(wanted))
    differences += _compare("static field", record["static"], template_static)
    if metadata is not None:
        differences += _compare("metadata", record["metadata"], _check_metadata(metadata))
    if differences:
        shown = differences[:_MAX_LISTED] + [f"... and {len(differences) - _MAX_LISTED} more"] * (
            len(differences) > _MAX_LISTED
        )
        holds = record.get("layout", {}).get("state")
        kinds = f" (it holds {holds}, the template is {wanted['state']})"
        kinds = kinds if holds != wanted["state"] else ""
        raise ValueError(
            f"checkpoint does not match the template{kinds if holds else ''} "
            "(leaves as dtype[shape]):\n  " + "\n  ".join(shown)
        )
    state = serialization.from_state_dict(template, saved)
    state_fields.check_values(state)
    return jax.tree.map(
        lambda like, value: jnp.asarray(value) if isinstance(like, jax.Array) else value,
        template,
        state,
    )
