"""Checkpoints of earlier format versions, brought to the current layout on loading.

The only module that knows what earlier versions held, so it may name the
transforms whose options it renames. :func:`migrate` is called by
:func:`~rewardnorm_jax.load_state` on every record before it is compared with
the template:

* version 1 stored each quantity of a ``RunningStats`` as its own leaf: they
  are packed, bit for bit (:func:`pack_v1_stats`);
* versions 1 and 2 stored ``normalize_reward``'s options flat (``"shared"``,
  ``"decay"``, ``"clip"``, ``"episodic"``, the semantics' switches), which the
  configuration now nests (``"statistics/per_env"``, ``"semantics/clip"``):
  they are renamed, and options added since take the values the older files
  implied (:func:`current_metadata`);
* options of ``normalize_observation`` and ``group_advantages`` added to
  the configuration in version 3 take the values that gave the arithmetic
  of the code that saved it (:func:`_with_added_v3_options`);
* state fields no longer kept are dropped, and static fields added since
  take the values older states held, in the static fields and in the
  layout, which records them too (:func:`current_fields`,
  :func:`current_static`).
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from rewardnorm_jax._src.core import semantics as sem_lib
from rewardnorm_jax._src.stats.running import PRIOR_COUNT

# Version 1 stored RunningStats as one leaf per quantity; version 2 packs them.
_V1_FLOATS = ("mean", "mean_low", "m2", "m2_low")
_V1_WORDS = ("count_hi", "count_lo")


def migrate(record: dict[str, Any], expected: Any, expected_static: dict[str, Any]) -> dict:
    """``record`` (a checkpoint's body) in the current layout, to compare with the template's.

    Args:
      record: the checkpoint's record: ``version``, ``state``, ``static``, ``metadata``.
      expected: the template's state dict.
      expected_static: the template's static fields by path.
    """
    version = record["version"]
    state = record["state"]
    if version == 1:
        state = pack_v1_stats(state)
    static = current_static(record["static"], expected_static)
    migrated = {
        **record,
        "state": current_fields(state, expected),
        "static": static,
        "metadata": current_metadata(record["metadata"], version),
    }
    if "layout" in record:  # it describes static fields by their repr
        added = {
            path: repr(value) for path, value in static.items() if path not in record["static"]
        }
        migrated["layout"] = {**added, **record["layout"]}
    return migrated


def pack_v1_stats(tree):
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
    tree = {key: pack_v1_stats(value) for key, value in tree.items()}
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


# Options of normalize_observation added in version 3, at the arithmetic of the
# checkpoints saved before them: the epsilon added to the variance, statistics never frozen.
_ADDED_OBSERVATION_OPTIONS = {"epsilon_on": "variance", "until_count": None}


ADDED_OPTIONS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "normalize_observation": lambda metadata, prefix: _ADDED_OBSERVATION_OPTIONS,
}
"""Per transform, the options added since version 3 was first written, at the values they implied,
from the metadata and a config's key prefix; a family registers those of its transforms here."""


def _with_added_v3_options(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata with the options version 3 gained since it was saved, at the values it implied.

    ``normalize_observation``: ``epsilon_on="variance"``, ``until_count=None``;
    ``group_advantages``: its estimator's preset; each transform's in :data:`ADDED_OPTIONS`.
    """
    metadata = dict(metadata)
    for key, value in list(metadata.items()):
        if not key.endswith("transform"):
            continue
        prefix = key[: -len("transform")]
        fill = ADDED_OPTIONS.get(value)
        if fill is None:
            continue
        added = fill(metadata, prefix)
        for option, default in added.items():
            metadata.setdefault(prefix + option, default)
    return metadata


# State fields that older checkpoints hold and states no longer keep: the task ids of a
# keyed normalize_reward, now an input of every step.
_REMOVED_FIELDS = frozenset({"task"})


def current_fields(saved, expected):
    """``saved`` with the fields states no longer keep dropped, and those added since as None.

    A field added since is one that is ``None`` in ``expected`` and absent from ``saved``.
    """
    if not (isinstance(saved, dict) and isinstance(expected, dict)):
        return saved
    filled = {
        key: current_fields(value, expected.get(key))
        for key, value in saved.items()
        if key in expected or key not in _REMOVED_FIELDS
    }
    for key, value in expected.items():
        if value is None and key not in saved:
            filled[key] = None
    return filled


# Static fields added after format version 2 began, at the values older states held.
# RunningStats: cumulative or exponential moving, with Gymnasium's prior.
_ADDED_STATIC = {"step_size": None, "prior_count": PRIOR_COUNT}
# An observation state's placement, recorded since beside its env_shape: an older state
# takes the template's, which the configuration's statistics/* metadata checks.
_ADDED_PLACEMENT = ("per_env", "num_tasks")


def current_static(saved: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """Saved static fields with those added since filled in (``RunningStats.prior_count``)."""
    filled = dict(saved)
    for path in expected:
        prefix, _, name = path.rpartition("/")
        sibling = f"{prefix}/" if prefix else ""
        if path in saved:
            continue
        if name in _ADDED_STATIC and sibling + "decay" in expected:  # a RunningStats
            filled[path] = _ADDED_STATIC[name]
        elif name in _ADDED_PLACEMENT and sibling + "env_shape" in saved:  # observations'
            filled[path] = expected[path]
    return filled


# normalize_reward's flat options of versions 1 and 2, by their nested name now.
_NESTED = {
    "semantics": "semantics/name",
    "reset_before": "semantics/reset_before",
    "reset_after": "semantics/reset_after",
    "freeze_stops_return": "semantics/freeze_stops_return",
    "clip": "semantics/clip",
    "components": "statistics/components",
    "num_tasks": "statistics/num_tasks",
    "decay": "statistics/decay",
}


def _nested_options(options: dict[str, Any], transform: str) -> dict[str, Any]:
    """One transform's flat options of version 1 or 2, renamed to the nested configuration's.

    ``shared`` becomes ``statistics/per_env`` (its negation); ``episodic=False``
    is the ``non_episodic`` semantics. The percentile scaler had no clip: it
    gets its semantics preset's.
    """
    nested = {_NESTED.get(key, key): value for key, value in options.items()}
    if transform == "normalize_reward":
        nested["statistics/per_env"] = not nested.pop("shared", True)
        if nested.pop("episodic", True) is False:
            nested["semantics/name"] = sem_lib.NON_EPISODIC.name
    elif "semantics/name" in nested:
        preset = sem_lib.PRESETS.get(nested["semantics/name"])
        nested["semantics/clip"] = None if preset is None else preset.clip
    return nested


def current_metadata(metadata: dict[str, Any], version: int) -> dict[str, Any]:
    """Metadata of any version with the current configuration's names and options.

    Transforms that versions 1 and 2 stored flat (``normalize_reward``,
    ``percentile_scale_reward``, also as a chain's members ``"i/..."``) are
    renamed by :func:`_nested_options`, after the options added since they
    were saved take the values they implied.
    """
    metadata = _with_added_v3_options(metadata)
    if version > 2:
        return metadata
    metadata = _with_added_options(metadata, version)
    renamed = dict(metadata)
    for key, value in metadata.items():
        if key.endswith("transform") and value in ("normalize_reward", "percentile_scale_reward"):
            prefix = key[: -len("transform")]
            options = {k[len(prefix) :]: v for k, v in metadata.items() if k.startswith(prefix)}
            options = {k: v for k, v in options.items() if "/" not in k}  # not a member's
            for option in options:
                renamed.pop(prefix + option)
            renamed.update({prefix + k: v for k, v in _nested_options(options, value).items()})
    return renamed
