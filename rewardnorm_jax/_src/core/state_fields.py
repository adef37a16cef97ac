"""What a transform state declares about its fields, read by every generic piece.

A state is a ``flax.struct`` dataclass (or a tuple of them, for a chain). It
declares two things, and nothing else names a field:

* which fields are per-environment data (a tracked return): they are made
  with :func:`~rewardnorm_jax._src.core.base.per_env_field`. They give the batch
  shape a state was made for, they restart in a state taking its statistics
  from another run (the adapters' ``with_stats_from``), and a state whose
  leaves are all such fields learns no statistics (:func:`has_statistics`);
* which values are valid: a method ``check_values(self, name)`` raising a
  ValueError for a value no step produces (a NaN return, a negative
  variance). :func:`check_values` walks a state and calls each one, so a
  checkpoint or an adapter checks any state without knowing its type.
"""

import dataclasses
from typing import Any

import jax

from rewardnorm_jax._src.core.base import PER_ENV, PyTree


def per_env_mask(tree: PyTree, per_env: bool = False) -> PyTree:
    """A pytree of ``tree``'s structure: ``True`` at its per-environment leaves."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        marked = {
            field.name: per_env_mask(
                getattr(tree, field.name), per_env or field.metadata.get(PER_ENV, False)
            )
            for field in dataclasses.fields(tree)
            if field.metadata.get("pytree_node", True) and field.init
        }
        return dataclasses.replace(tree, **marked)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a NamedTuple
        return type(tree)(*(per_env_mask(value, per_env) for value in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(per_env_mask(value, per_env) for value in tree)
    if isinstance(tree, dict):
        return {key: per_env_mask(value, per_env) for key, value in tree.items()}
    # Any other pytree node (a state written by hand) declares nothing: its leaves inherit.
    return jax.tree.map(lambda _: per_env, tree)


def _leaves(tree: PyTree) -> list[tuple[Any, bool]]:
    """``(leaf, per_env)`` for every leaf of ``tree``."""
    flags = jax.tree.leaves(per_env_mask(tree))
    return list(zip(jax.tree.leaves(tree), flags, strict=True))


def per_env_leaves(state: PyTree) -> list[Any]:
    """The leaves of the state's per-environment fields."""
    return [leaf for leaf, per_env in _leaves(state) if per_env]


def batch_shape(state: PyTree) -> tuple[int, ...] | None:
    """The shape of the state's first per-environment field; ``None`` if it has none."""
    for leaf in per_env_leaves(state):
        shape = getattr(leaf, "shape", ())
        return tuple(shape) if isinstance(shape, tuple) else ()
    return None


def has_statistics(state: PyTree) -> bool:
    """Whether a state learns statistics: any leaf outside its per-environment fields."""
    return any(not per_env for _, per_env in _leaves(state))


def check_values(state: PyTree, name: str = "state") -> None:
    """Calls the ``check_values(name)`` of every dataclass in ``state`` that declares one.

    Each is named by its path (``state[0].stats``), and checks its own fields;
    the dataclasses nested in it are reached by the walk.
    """
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        check = getattr(state, "check_values", None)
        if check is not None:
            check(name)
        for field in dataclasses.fields(state):
            if field.metadata.get("pytree_node", True):
                check_values(getattr(state, field.name), f"{name}.{field.name}")
    elif isinstance(state, (tuple, list)):
        for position, value in enumerate(state):
            check_values(value, f"{name}[{position}]")
    elif isinstance(state, dict):
        for key, value in state.items():
            check_values(value, f"{name}[{key!r}]")
