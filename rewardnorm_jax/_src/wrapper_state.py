"""What every environment adapter shares: its state, reading and writing it, and placement.

Adapters (``rewardnorm_jax.gymnax``, ``rewardnorm_jax.jumanji``,
``rewardnorm_jax.brax``) import this module; it imports no environment
framework.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.base import RewardTransform
from rewardnorm_jax._src.normalize import normalize_reward

PyTree = Any
SEMANTICS_DEFAULT = object()  # an adapter's ``clip`` left out: the semantics' own bound


class RewardWrapperState(struct.PyTreeNode):
    """State of a reward-transform wrapper (gymnax, Jumanji): inner and transform state."""

    env_state: PyTree  # the wrapped environment's state
    transform_state: PyTree  # the reward transform's state (statistics, tracked returns)
    update_stats: jax.Array  # bool (), False freezes the statistics on every step


def _find(state: PyTree, fn: Callable[[RewardWrapperState], Any], replace: bool):
    """Applies ``fn`` to the outermost :class:`RewardWrapperState` in a wrapper stack.

    Wrapper states nest the inner state in an ``env_state`` field (gymnax's
    ``LogEnvState``, :class:`RewardWrapperState`), so the search
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
      state: the state of a reward-transform wrapper (gymnax or Jumanji), or of
        any wrapper stack around one (the outermost one is read).

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

    The flag lives in the state, so it reaches a reward-transform wrapper
    under other wrappers (``LogWrapper``, a ``VecEnv``) whose
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


def has_statistics(transform_state: PyTree) -> bool:
    """Whether a transform state learns statistics: any leaf outside its tracked returns."""
    leaves = jax.tree_util.tree_leaves_with_path(transform_state)
    return any(
        not any(isinstance(k, jax.tree_util.GetAttrKey) and k.name == RETURN_FIELD for k in path)
        for path, _ in leaves
    )


def check_transform(transform: Any) -> RewardTransform:
    """``transform`` itself, after checking it is a :class:`~rewardnorm_jax.RewardTransform`.

    Raises:
      ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`.
    """
    if not isinstance(transform, RewardTransform):
        raise ValueError(
            f"transform should be a rewardnorm_jax.RewardTransform (e.g. "
            f"rn.normalize_reward()), got {transform!r} of type "
            f"{type(transform).__name__}."
        )
    return transform


def normalize_transform(
    gamma: float,
    epsilon: float,
    semantics: Any,
    clip: Any,
    dtype: Any,
    axis_name: Any,
    per_env: bool,
    options: dict[str, Any],
) -> tuple[RewardTransform, bool]:
    """The transform of an adapter's ``NormalizeReward`` and its ``per_env`` flag.

    Builds :func:`~rewardnorm_jax.normalize_reward` from the adapter's
    arguments (``clip`` passed on unless it is :data:`SEMANTICS_DEFAULT`);
    ``shared=False`` in ``options`` asks for ``per_env`` as well.

    Raises:
      ValueError: for an invalid hyperparameter (see
        :func:`~rewardnorm_jax.normalize_reward`).
    """
    if clip is not SEMANTICS_DEFAULT:
        options = {**options, "clip": clip}
    transform = normalize_reward(
        gamma, epsilon, semantics=semantics, dtype=dtype, axis_name=axis_name, **options
    )
    return transform, per_env or not options.get("shared", True)


def init_transform_state(
    wrapper: str,
    transform: RewardTransform,
    batch_shape: tuple[int, ...],
    axis_name: Any,
    per_env: bool,
) -> PyTree:
    """``transform.init(batch_shape)``, checked by :func:`check_placement`.

    Raises:
      ValueError: as :func:`check_placement`.
    """
    transform_state = transform.init(batch_shape)
    check_placement(wrapper, batch_shape, transform_state, axis_name=axis_name, per_env=per_env)
    return transform_state


def check_placement(
    wrapper: str, batch_shape: tuple[int, ...], transform_state: PyTree, *, axis_name, per_env: bool
) -> None:
    """Refuses, at trace time, statistics silently split one set per environment.

    A wrapper that resets one environment (``batch_shape == ()``) and learns
    statistics sees that environment's rewards alone. Under an unnamed
    ``jax.vmap`` (PureJaxRL's or gymnax's ``VecEnv``, Brax's ``VmapWrapper``,
    Jumanji's ``VmapAutoResetWrapper``) each environment then keeps its own
    statistics, and nothing in the numbers shows it. So a wrapper that serves
    one environment must say where its statistics live: shared across a named
    axis (``axis_name``) or, explicitly, per environment (``per_env=True``).

    Raises:
      ValueError: for a one-environment wrapper with statistics and neither
        ``axis_name`` nor ``per_env=True``.
    """
    if batch_shape != () or axis_name is not None or per_env:
        return
    if not has_statistics(transform_state):
        return
    raise ValueError(
        f"{wrapper} was reset with the key of one environment (batch_shape=()) and no "
        "axis_name, so it would keep statistics of that environment alone; under a "
        "jax.vmap (a VecEnv, VmapWrapper or VmapAutoResetWrapper) every environment would "
        "silently get its own. Choose one: wrap the batched environment instead "
        f"({wrapper}(VecEnv(env)) and the like: one set shared by the batch); pass "
        "axis_name='envs' and vmap with the same axis name (one set merged across the "
        "axis); or pass per_env=True (one set per environment, or a single environment)."
    )


def with_stats_from(state: PyTree, stats_from: PyTree) -> PyTree:
    """``state`` with the statistics of ``stats_from``, its own tracked returns kept.

    For an evaluation (or a resumed run) after a fresh reset: the statistics
    (running moments, percentiles, running max of ``|G|``) come from
    ``stats_from``, the tracked returns (fields ``ret``) stay those of the
    outermost :class:`RewardWrapperState` in ``state``, so ``stats_from`` may
    come from a batch of another size.

    Raises:
      ValueError: if the state holds no :class:`RewardWrapperState`, or
        ``stats_from`` differs from its transform state in structure, or in
        shape or dtype outside ``ret``.
    """

    def replace(wrapper_state: RewardWrapperState) -> RewardWrapperState:
        kept = keep_stats(wrapper_state.transform_state, stats_from)
        return wrapper_state.replace(transform_state=kept)

    return _find(state, replace, replace=True)
