"""The wrapper state and the functions that read and write it inside any wrapper stack."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

PyTree = Any


class RewardWrapperState(struct.PyTreeNode):
    """State of :class:`~rewardnorm_jax.gymnax.RewardTransformWrapper`."""

    env_state: PyTree  # the wrapped environment's state
    transform_state: PyTree  # the reward transform's state (statistics, tracked returns)
    update_stats: jax.Array  # bool (), False freezes the statistics on every step


def _find(state: PyTree, fn: Callable[[RewardWrapperState], Any], replace: bool):
    """Applies ``fn`` to the outermost :class:`RewardWrapperState` in a wrapper stack.

    Wrapper states nest the inner state in an ``env_state`` field (gymnax's
    ``LogEnvState``, this package's :class:`RewardWrapperState`), so the search
    follows ``env_state`` down. With ``replace``, ``fn`` returns a new
    :class:`RewardWrapperState` and the stack is rebuilt around it.
    """
    if isinstance(state, RewardWrapperState):
        return fn(state)
    if not hasattr(state, "env_state"):
        raise ValueError(
            f"no RewardWrapperState found in a state of type {type(state).__name__}; "
            "pass the state returned by a RewardTransformWrapper (or by a wrapper "
            "stack containing one)."
        )
    inner = _find(state.env_state, fn, replace)
    return state.replace(env_state=inner) if replace else inner


def get_transform_state(state: PyTree) -> PyTree:
    """The reward transform's state (e.g. to checkpoint the statistics).

    Args:
      state: the state of a :class:`~rewardnorm_jax.gymnax.RewardTransformWrapper`,
        or of any wrapper stack around one (the outermost one is read).

    Returns:
      The transform state: for :class:`~rewardnorm_jax.gymnax.NormalizeReward`
      a :class:`~rewardnorm_jax.NormalizeRewardState` with ``stats`` and ``ret``.

    Raises:
      ValueError: if the state holds no :class:`RewardWrapperState`.
    """
    return _find(state, lambda s: s.transform_state, replace=False)


def set_transform_state(state: PyTree, transform_state: PyTree) -> PyTree:
    """``state`` with the reward transform's state replaced (e.g. from a checkpoint).

    The replacement is used exactly as given (statistics and tracked returns);
    it must have the structure, shapes and dtypes of the state it replaces so
    the result still fits ``lax.scan``.

    Raises:
      ValueError: if the state holds no :class:`RewardWrapperState`, or the
        replacement differs in structure, shape or dtype.
    """

    def replace(wrapper_state: RewardWrapperState) -> RewardWrapperState:
        check_same_layout(wrapper_state.transform_state, transform_state, "transform_state")
        return wrapper_state.replace(transform_state=transform_state)

    return _find(state, replace, replace=True)


def set_update_stats(state: PyTree, update_stats: jax.typing.ArrayLike) -> PyTree:
    """``state`` with the statistics frozen (``False``) or learning (``True``).

    The flag lives in the state, so it reaches a
    :class:`~rewardnorm_jax.gymnax.RewardTransformWrapper` under other
    wrappers (``LogWrapper``, :class:`~rewardnorm_jax.gymnax.VecEnv`) whose
    ``step`` does not take ``update_stats``. It may be a traced boolean; under
    a ``jax.vmap`` of the environment it is batched like the rest of the state,
    and with statistics shared through an ``axis_name`` an environment whose
    flag is false only withholds its own returns from the shared merge.

    Raises:
      ValueError: if the state holds no :class:`RewardWrapperState`.
    """

    def replace(wrapper_state: RewardWrapperState) -> RewardWrapperState:
        flag = jnp.broadcast_to(
            jnp.asarray(update_stats, bool), jnp.shape(wrapper_state.update_stats)
        )
        return wrapper_state.replace(update_stats=flag)

    return _find(state, replace, replace=True)


def check_same_layout(expected: PyTree, given: PyTree, name: str) -> None:
    """Raises a ValueError unless two pytrees agree in structure, shapes and dtypes."""
    expected_def, given_def = jax.tree.structure(expected), jax.tree.structure(given)
    # jax annotates tree structures with a PyTreeDef alias that mypy cannot resolve.
    if expected_def != given_def:  # type: ignore[operator, unused-ignore]
        raise ValueError(
            f"{name} has structure {given_def}, expected {expected_def} (the "
            "structure of this wrapper's transform state)."
        )
    for want, got in zip(jax.tree.leaves(expected), jax.tree.leaves(given), strict=True):
        if jnp.shape(want) != jnp.shape(got) or jnp.result_type(want) != jnp.result_type(got):
            raise ValueError(
                f"{name} has a leaf of shape {jnp.shape(got)} and dtype "
                f"{jnp.result_type(got)}, expected shape {jnp.shape(want)} and dtype "
                f"{jnp.result_type(want)}."
            )


RETURN_FIELD = "ret"  # the tracked discounted return in every core transform state


def keep_stats(fresh: PyTree, stats_from: PyTree) -> PyTree:
    """``stats_from`` with its tracked returns taken from ``fresh``.

    Every field named ``ret`` (the tracked discounted return of
    :class:`~rewardnorm_jax.NormalizeRewardState` and of the percentile
    scaler's state) comes from ``fresh``, a newly initialised transform state,
    so the returns restart at zero and may have another batch size. Everything
    else (running statistics, percentiles, the running max of ``|G|``) comes
    from ``stats_from`` and must match ``fresh`` in shape and dtype.

    Raises:
      ValueError: if the two differ in structure, or a kept leaf differs in
        shape or dtype.
    """
    fresh_def, given_def = jax.tree.structure(fresh), jax.tree.structure(stats_from)
    # jax annotates tree structures with a PyTreeDef alias that mypy cannot resolve.
    if fresh_def != given_def:  # type: ignore[operator, unused-ignore]
        raise ValueError(
            f"stats_from has structure {given_def}, expected {fresh_def} (a "
            "transform state of this wrapper, e.g. get_transform_state(state))."
        )

    def pick(path, fresh_leaf, given_leaf):
        last = path[-1] if path else None
        if isinstance(last, jax.tree_util.GetAttrKey) and last.name == RETURN_FIELD:
            return fresh_leaf
        if jnp.shape(fresh_leaf) != jnp.shape(given_leaf) or (
            jnp.result_type(fresh_leaf) != jnp.result_type(given_leaf)
        ):
            raise ValueError(
                f"stats_from{jax.tree_util.keystr(path)} has shape {jnp.shape(given_leaf)} "
                f"and dtype {jnp.result_type(given_leaf)}, expected shape "
                f"{jnp.shape(fresh_leaf)} and dtype {jnp.result_type(fresh_leaf)} "
                "(only the tracked returns may change batch size)."
            )
        return given_leaf

    return jax.tree_util.tree_map_with_path(pick, fresh, stats_from)
