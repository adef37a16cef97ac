"""The one shape of every environment adapter: a wrapper that holds a reward transform.

An adapter (``rewardnorm_jax.gymnax``, ``rewardnorm_jax.brax``,
``rewardnorm_jax.jumanji``, ``rewardnorm_jax.jaxmarl``) subclasses its suite's wrapper class and
:class:`TransformWrapper`, and keeps only what is its suite's own: reading the
rewards and episode ends of a step, and where the raw reward is stored. Holding
the transform, placing its statistics, the reward step, the task ids of keyed
statistics (``task_of``) and the state accessors are written here, once, for any
transform: what a state holds is read from its declarations
(:mod:`~rewardnorm_jax._src.core.state_fields`). This module imports no environment
framework and names no transform (``NormalizeReward`` is built in
:mod:`~rewardnorm_jax._src.reward.normalize_wrapper`).

The transform state and the freeze flag live either in a
:class:`RewardWrapperState` around the inner state (gymnax, Jumanji, JaxMARL), or under
the keys :data:`TRANSFORM_STATE` and :data:`UPDATE_STATS` of ``state.info``
(Brax and MuJoCo Playground, whose wrappers share one ``State``). The accessors
find either, inside any stack of wrappers that nest their inner state in
``env_state``.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.core import base, checks, state_fields
from rewardnorm_jax._src.core.base import RewardTransform
from rewardnorm_jax._src.core.checks import check_bool
from rewardnorm_jax._src.stats.running import check_axis_name, participants

PyTree = Any
RAW_REWARD = "raw_reward"  # the key under which an adapter keeps the reward before the transform
TRANSFORM_STATE = "reward_transform_state"  # state.info key (Brax): the transform's state
UPDATE_STATS = "reward_update_stats"  # state.info key (Brax): bool (), False freezes statistics


class RewardWrapperState(struct.PyTreeNode):
    """State of a reward-transform wrapper (gymnax, Jumanji, JaxMARL): inner and transform state."""

    env_state: PyTree  # the wrapped environment's state
    transform_state: PyTree  # the reward transform's state (statistics, tracked returns)
    update_stats: jax.Array  # bool (), False freezes the statistics on every step


class TransformWrapper:
    """What every adapter's ``RewardTransformWrapper`` shares, whatever its suite.

    Subclasses list their suite's wrapper class after this one, whose
    ``__init__(env)`` it calls, and may say how their suite batches the
    wrapper in ``batched_example`` (``{}`` is the wrapper's class name), how
    many trailing axes of a step's rewards belong to one environment in
    ``component_axes`` (JaxMARL's agents: 1), and, in ``known_layout``,
    whether their suite's rewards have exactly those axes beyond the
    environments (Jumanji's may hold agents too: it does not say).
    """

    batched_example = "{}(VecEnv(env))"
    component_axes = 0
    known_layout = True

    def __init__(
        self,
        env: Any,
        transform: RewardTransform,
        *,
        axis_name: Any = None,
        per_env: bool = False,
        task_of: Callable[[Any], jax.Array] | None = None,
    ):
        """Wraps ``env``.

        Args:
          env: the wrapped environment (single or batched).
          transform: the reward transform applied to every reward.
          axis_name: for a wrapper serving one environment under
            ``jax.vmap(..., axis_name=...)``: the axis name the transform was
            built with, across which it shares its statistics.
          per_env: for a wrapper serving one environment: keep statistics of
            that environment alone (one set per environment under an unnamed
            ``jax.vmap``).
          task_of: for a keyed transform (built with ``Statistics(num_tasks=K)``, alone or
            in a :func:`~rewardnorm_jax.chain`): a function of the wrapped
            environment's state returning each environment's task id
            (integers in ``[0, K)``, one per environment: shape ``()`` for a
            wrapper serving one environment, ``(N,)`` for a batch of N). Every
            step reads the ids from the state the step starts in (the task
            its reward belongs to) and passes them to the transform. The ids
            are traced there (the wrappers' steps run jitted), so an id
            outside ``[0, K)`` is checked only where the step runs under
            ``jax.experimental.checkify.checkify`` (the error names the first
            bad id); without it, that environment's return joins no task's
            statistics and its reward is NaN.

        Raises:
          ValueError: if ``transform`` is not a :class:`~rewardnorm_jax.RewardTransform`,
            ``env`` already holds an adapter's wrapper (compose transforms
            with :func:`~rewardnorm_jax.chain` in one wrapper), both
            ``per_env`` and ``axis_name`` are given, or ``task_of`` is given
            for a transform without ``num_tasks`` (or left out for one with).
          TypeError: if ``per_env`` is not a bool, ``axis_name`` no axis
            name (a name that no map binds is refused at the reset), or
            ``task_of`` not callable.
        """
        check_not_nested(env)
        super().__init__(env)  # type: ignore[call-arg]  # the suite's wrapper, next in the MRO
        self._transform = check_transform(transform)
        self._axis_name = check_axis_name(axis_name)
        self._per_env = check_bool("per_env", per_env)
        self._task_of = check_task_of(task_of, self._transform)
        if self._per_env and self._axis_name is not None:
            raise ValueError(
                f"per_env=True keeps one set of statistics per environment, axis_name="
                f"{axis_name!r} one set merged across the axis: pass one of them."
            )

    @property
    def transform(self) -> RewardTransform:
        """The reward transform applied to every reward."""
        return self._transform

    def init_transform_state(
        self, batch_shape: tuple[int, ...], component_shape: tuple[int, ...] = ()
    ) -> PyTree:
        """The transform's initial state for rewards of shape ``batch_shape + component_shape``.

        ``batch_shape`` is the environments' shape; ``component_shape`` the
        trailing axes of one environment's reward (JaxMARL's agents stacked
        along an axis), which the placement rules do not count as a batch.

        Raises:
          ValueError: as :func:`check_placement` (at the reset, not at the first
            step); for a transform whose ``components`` exceed the reward axes
            of one environment (each environment would get its own statistics).
        """
        if self.known_layout:
            check_components(type(self).__name__, self._transform, batch_shape, component_shape)
        transform_state = self._transform.init(batch_shape + component_shape)
        check_placement(
            type(self).__name__,
            self.batched_example,
            self._transform,
            transform_state,
            batch_shape,
            self._axis_name,
            self._per_env,
            component_shape=component_shape,
        )
        return transform_state

    def reset_reward(self, transform_state: PyTree, reward: jax.Array) -> jax.Array:
        """A reset's reward in the dtype of transformed rewards, so resets and steps agree.

        A normalized reward is a float even for integer raw rewards; a reset
        that returned the raw dtype would change the type of a ``lax.scan``
        carry after the first step.
        """
        ids = any_task(self._transform)  # the dtype does not depend on the ids
        out = jax.eval_shape(lambda: self._transform.apply(transform_state, reward, **ids))
        return jnp.asarray(reward, out.dtype)

    def step_reward(
        self,
        transform_state: PyTree,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
        update_stats: jax.typing.ArrayLike,
        env_state: Any = None,
    ) -> tuple[jax.Array, PyTree]:
        """``(reward, transform_state)``: the transform's step for one environment step.

        Episode ends of one environment spread to all its rewards (per-agent
        rewards share their step's end), as :func:`align_flag` says. With
        ``task_of``, each environment's task is read from ``env_state``, the
        state the step started from (the task its reward belongs to), and
        passed to the transform as ``task=``.
        """
        task = None
        if self._task_of is not None:
            env_shape = jnp.shape(reward)[: jnp.ndim(reward) - self.component_axes]
            task = check_task_shape(
                type(self).__name__, self._task_of(env_state), env_shape, self.known_layout
            )
        return self._transform.step(
            transform_state,
            reward,
            align_flag("terminated", terminated, reward),
            align_flag("truncated", truncated, reward),
            update_stats,
            **base.task_keyword(self._transform, task),
        )


def config_values(config: Any) -> list[Any]:
    """Every option value of a configuration, those of nested ones included.

    A :class:`~rewardnorm_jax.chain`'s members are transforms whose
    configurations are walked in turn, so a wrapper reads what any transform
    holds (a :class:`~rewardnorm_jax.Semantics`) by its type, never by a key.
    """
    found = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        found.append(value)
        values = value if isinstance(value, tuple) else (value,)
        for member in values:
            if isinstance(member, RewardTransform):
                found.extend(config_values(member.config))
    return found


def check_task_of(task_of: Any, transform: Any) -> Callable[[Any], jax.Array] | None:
    """``task_of``, after checking it is given exactly for a keyed ``transform``.

    ``transform`` is anything with ``num_tasks``: a
    :class:`~rewardnorm_jax.RewardTransform`, an observation normalizer.

    Raises:
      ValueError: for ``task_of`` with a transform that keeps no per-task
        statistics, or a keyed transform without ``task_of`` (its statistics
        would get no task ids).
      TypeError: for a ``task_of`` that is not callable.
    """
    if (task_of is None) != (transform.num_tasks is None):
        raise ValueError(
            "num_tasks and task_of go together: a transform with per-task statistics keeps one "
            "set of statistics per task, and task_of(env_state) says each environment's "
            f"task; got a transform with num_tasks={transform.num_tasks!r} and "
            f"task_of={task_of!r}. E.g. NormalizeReward(env, 0.99, "
            "statistics=rn.Statistics(num_tasks=K), "
            "task_of=lambda env_state: env_state.task)."
        )
    if task_of is not None and not callable(task_of):
        raise TypeError(f"task_of should be a function of the env state, got {task_of!r}.")
    return task_of


def any_task(transform: RewardTransform) -> dict[str, jax.Array]:
    """The keyword arguments of a call that traces ``transform`` for its shapes and collectives.

    A keyed transform gets task 0 for every environment (one id, spread over
    the environments), which no statistics ever see; any other gets none.
    """
    return base.task_keyword(transform, jnp.zeros((), jnp.int32))


def check_task_shape(
    wrapper: str, task: Any, env_shape: tuple[int, ...], known_layout: bool = True
) -> Any:
    """``task``, after checking ``task_of`` gave one id per environment (``env_shape``).

    Where the suite does not say which of the rewards' axes are environments
    (``known_layout=False``: Jumanji's rewards may hold one number per agent),
    ids of a leading part of the rewards' shape fit too, one id for every
    reward of an environment; the part holds at least the first axis, so one
    id never stands for a whole batch.

    Raises:
      ValueError: naming ``task_of``, the shape it returned and the environments'.
    """
    shape = jnp.shape(task)
    leads = len(shape) > 0 and shape == env_shape[: len(shape)]  # at least the batch axis
    if shape == env_shape or (not known_layout and leads):
        return task
    if known_layout:
        serves = "one environment" if env_shape == () else f"environments of shape {env_shape}"
        expected = f"{env_shape}, one task id per environment (this wrapper serves {serves})"
    else:
        expected = (
            f"the rewards' shape {env_shape} or a leading part of it with at least its first "
            "axis, one task id per environment for all of its rewards"
        )
    raise ValueError(f"{wrapper}'s task_of returned ids of shape {shape}; expected {expected}.")


def check_components(
    wrapper: str,
    transform: RewardTransform,
    batch_shape: tuple[int, ...],
    component_shape: tuple[int, ...],
) -> None:
    """Refuses a transform that would take environment axes for components of one reward.

    ``components=c`` takes the rewards' last ``c`` axes as components of one
    environment's reward (objectives, agents), each with statistics of its
    own. Around rewards with fewer such axes it would take the environments'
    axis for components, and every environment would silently keep its own
    statistics.

    Raises:
      ValueError: naming ``components``, the rewards' layout and the fix.
    """
    if transform.components <= len(component_shape):
        return
    layout = (
        "one number per environment"
        if component_shape == ()
        else f"{len(component_shape)} component axis per environment, shape {component_shape}"
    )
    raise ValueError(
        f"{wrapper}'s transform has components={transform.components}: it takes the rewards' "
        f"last {transform.components} axes as components of one environment's reward "
        f"(objectives, agents), but this environment's rewards are {layout} (reward shape "
        f"{batch_shape + component_shape}, environments {batch_shape}), so each environment "
        f"would silently keep statistics of its own. Build the transform with "
        f"rn.Statistics(components={len(component_shape)}) for one set shared by the "
        "environments, or with rn.Statistics(per_env=True) for one set per environment."
    )


def check_not_nested(env: Any) -> None:
    """Refuses an environment that already holds an adapter's wrapper.

    Stacked adapter wrappers would share one place for the transform state
    (Brax's ``state.info`` keys, the raw reward's key) or hide the inner
    state from :func:`get_transform_state` and :func:`set_update_stats`,
    which reach the outermost only: a freeze or checkpoint would silently
    miss the inner statistics. The wrappers of every suite keep the wrapped
    environment in ``_env`` (gymnax, Jumanji) or ``env`` (Brax).

    Raises:
      ValueError: naming the inner wrapper and the one-wrapper composition.
    """
    inner, seen = env, set()
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, TransformWrapper):
            raise ValueError(
                f"the environment already holds {type(inner).__name__}, a reward wrapper of "
                "rewardnorm_jax; compose transforms in one wrapper instead, e.g. "
                "RewardTransformWrapper(env, rn.chain(rn.normalize_reward(), "
                'rn.clip_reward(-10.0, 10.0))) or NormalizeReward(env, semantics="sb3").'
            )
        seen.add(id(inner))
        attributes = getattr(inner, "__dict__", {})
        inner = attributes.get("_env", attributes.get("env"))


def check_transform(transform: Any) -> RewardTransform:
    """``transform`` itself, after checking it is a :class:`~rewardnorm_jax.RewardTransform`.

    Raises:
      ValueError: if it is not.
    """
    if not isinstance(transform, RewardTransform):
        raise ValueError(
            f"transform should be a rewardnorm_jax.RewardTransform (e.g. "
            f"rn.normalize_reward()), got {transform!r} of type "
            f"{type(transform).__name__}."
        )
    return transform


def align_flag(name: str, flag: jax.typing.ArrayLike, reward: jax.Array) -> jax.Array:
    """``flag`` spread over the trailing axes of ``reward`` it lacks.

    An episode end of shape ``(N,)`` is the end of every reward of its
    environment, so with rewards of shape ``(N, A)`` (one per agent) it is
    read as ``(N, 1)`` and broadcast to ``(N, A)``. A flag must be a scalar
    or lead the reward's shape.

    Raises:
      ValueError: naming the flag, its shape and the reward's, for a flag whose
        shape does not lead the reward's (it would broadcast across environments).
    """
    shape, reward_shape = jnp.shape(flag), jnp.shape(reward)
    if shape != reward_shape[: len(shape)]:
        raise ValueError(
            f"{name} has shape {shape}, which does not lead the reward's shape "
            f"{reward_shape}: an episode end must be one per environment (the reward's "
            "leading axes) or one per reward."
        )
    return checks.spread(flag, reward_shape)


def batch_shape_of_key(key: jax.Array) -> tuple[int, ...]:
    """The environment batch a reset key stands for: one key per environment.

    Typed keys (``jax.random.key``) have the batch's shape; raw ``uint32``
    keys (``jax.random.PRNGKey``) carry the key data on a trailing axis.
    """
    key = jnp.asarray(key)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return tuple(key.shape)
    return tuple(key.shape[:-1])


def check_placement(
    wrapper: str,
    batched_example: str,
    transform: RewardTransform,
    transform_state: PyTree,
    batch_shape: tuple[int, ...],
    axis_name,
    per_env: bool,
    *,
    component_shape: tuple[int, ...] = (),
) -> None:
    """Refuses, at trace time, statistics placed other than the wrapper says.

    A wrapper that resets one environment (``batch_shape == ()``) and learns
    statistics sees that environment's rewards alone.
    Under an unnamed ``jax.vmap`` (PureJaxRL's or gymnax's ``VecEnv``, Brax's
    ``VmapWrapper``, Jumanji's ``VmapAutoResetWrapper``) each environment then
    keeps its own statistics, and nothing in the numbers shows it. So a
    wrapper that serves one environment must say where its statistics live:
    shared across a named axis (``axis_name``, which the transform must merge
    across: its step is traced once, not run, and must hold a collective over
    every name) or, explicitly, per environment (``per_env=True``, or a
    transform built with ``Statistics(per_env=True)``).

    Args:
      wrapper: the wrapper's class name, for the messages.
      batched_example: how the suite batches the wrapper (``{}`` is ``wrapper``).
      transform: the wrapper's transform.
      transform_state: its initial state.
      batch_shape: the environments' shape of the rewards it serves.
      axis_name: the wrapper's ``axis_name``.
      per_env: the wrapper's ``per_env``.
      component_shape: the trailing axes of one environment's reward (its
        agents), after ``batch_shape``.

    Raises:
      ValueError: for an ``axis_name`` that no enclosing map binds;
        ``per_env=True`` around a batch; a one-environment wrapper with
        statistics and no placement said; an ``axis_name`` the transform
        merges nothing across.
    """
    participants(axis_name)  # an unbound name is refused here, at the reset
    if per_env and batch_shape != ():
        raise ValueError(
            f"{wrapper} has per_env=True but serves a batch of shape {batch_shape}: per_env "
            "is for a wrapper serving one environment. For one set of statistics per "
            "environment of a batch, build the transform with rn.Statistics(per_env=True)."
        )
    if batch_shape != () or not state_fields.has_statistics(transform_state):
        return
    if axis_name is not None:
        _check_shared(wrapper, transform, transform_state, axis_name, component_shape)
    elif not (per_env or transform.per_env):
        raise ValueError(
            f"{wrapper} was reset with the key of one environment (batch_shape=()) and no "
            "axis_name, so it would keep statistics of that environment alone; under a "
            "jax.vmap (a VecEnv, VmapWrapper or VmapAutoResetWrapper) every environment "
            "would silently get its own. Choose one: wrap the batched environment instead "
            f"({batched_example.format(wrapper)}: one set shared by the batch); pass "
            "axis_name='envs' and vmap with the same axis name (one set merged across the "
            "axis); or pass per_env=True (one set per environment, or a single environment)."
        )


def _check_shared(
    wrapper: str,
    transform: RewardTransform,
    transform_state: PyTree,
    axis_name,
    component_shape: tuple[int, ...],
):
    """Refuses a transform whose step holds no collective over a name of ``axis_name``."""
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    sizes = [(name, participants(name)) for name in names]
    reward = jnp.zeros(component_shape, jnp.float32)
    ids = any_task(transform)
    step = jax.make_jaxpr(
        lambda state: transform.step(state, reward, False, False, **ids), axis_env=sizes
    )
    missing = set(names) - _collective_axes(step(transform_state).jaxpr)
    if missing:
        raise ValueError(
            f"{wrapper} has axis_name={axis_name!r}, but its transform merges nothing across "
            f"{sorted(missing, key=str)}, so every environment would keep its own statistics: "
            f"build the transform with the same axis_name (e.g. rn.normalize_reward(..., "
            f"axis_name={axis_name!r}))."
        )


def _collective_axes(jaxpr) -> set:
    """The named axes of every collective in ``jaxpr`` and the jaxprs nested in it."""
    found: set = set()
    for eqn in jaxpr.eqns:
        axes = eqn.params.get("axes", ())
        found.update(axes if isinstance(axes, tuple) else (axes,))
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)  # a closed jaxpr holds its jaxpr
                if hasattr(inner, "eqns"):
                    found |= _collective_axes(inner)
    return found


def _read(state: PyTree) -> tuple[PyTree, jax.Array]:
    """``(transform_state, update_stats)`` of the outermost adapter in a wrapper stack."""
    if isinstance(state, RewardWrapperState):
        return state.transform_state, state.update_stats
    info = getattr(state, "info", None)
    if isinstance(info, Mapping) and TRANSFORM_STATE in info:
        return info[TRANSFORM_STATE], info[UPDATE_STATS]
    if hasattr(state, "env_state"):
        return _read(state.env_state)
    raise ValueError(
        f"no reward transform state found in a state of type {type(state).__name__} (a "
        f"RewardWrapperState, or state.info[{TRANSFORM_STATE!r}]); pass the state returned "
        "by a rewardnorm_jax adapter's wrapper, or by a wrapper stack containing one."
    )


def _write(state: PyTree, transform_state: PyTree, update_stats: jax.Array) -> PyTree:
    """``state`` with the outermost adapter's transform state and flag replaced."""
    if isinstance(state, RewardWrapperState):
        return state.replace(transform_state=transform_state, update_stats=update_stats)
    info = getattr(state, "info", None)
    if isinstance(info, Mapping) and TRANSFORM_STATE in info:
        info = {**info, TRANSFORM_STATE: transform_state, UPDATE_STATS: update_stats}
        return state.replace(info=info)
    return state.replace(env_state=_write(state.env_state, transform_state, update_stats))


def get_transform_state(state: PyTree) -> PyTree:
    """The reward transform's state (e.g. to checkpoint the statistics).

    Args:
      state: the state of an adapter's wrapper, or of any wrapper stack around
        one (the outermost one is read).

    Returns:
      The transform state: for ``NormalizeReward`` a
      :class:`~rewardnorm_jax.NormalizeRewardState` with ``stats`` and ``ret``.

    Raises:
      ValueError: if the state holds no transform state.
    """
    return _read(state)[0]


def set_transform_state(state: PyTree, transform_state: PyTree) -> PyTree:
    """``state`` with the reward transform's state replaced (e.g. from a checkpoint).

    The replacement is used exactly as given (statistics and tracked returns);
    it must have the structure, shapes and dtypes of the state it replaces so
    the result still fits ``lax.scan``. :func:`with_stats_from` keeps the
    tracked returns instead.

    Raises:
      ValueError: if the state holds no transform state, or the replacement
        differs in structure, shape or dtype.
    """
    current, update_stats = _read(state)
    check_same_layout(current, transform_state, "transform_state")
    check_concrete_values(transform_state, "transform_state")
    return _write(state, transform_state, update_stats)


def with_stats_from(state: PyTree, stats_from: PyTree) -> PyTree:
    """``state`` with the statistics of ``stats_from``, its own tracked returns kept.

    For an evaluation (or a resumed run) after a fresh reset: the statistics
    (running moments, percentiles, running max of ``|G|``) come from
    ``stats_from``, the tracked returns (fields ``ret``) stay those of
    ``state``, so ``stats_from`` may come from a batch of another size.

    Raises:
      ValueError: if the state holds no transform state, or ``stats_from``
        differs from it in structure, or in shape or dtype outside ``ret``.
    """
    current, update_stats = _read(state)
    check_concrete_values(stats_from, "stats_from")
    return _write(state, keep_stats(current, stats_from), update_stats)


def set_update_stats(state: PyTree, update_stats: jax.typing.ArrayLike) -> PyTree:
    """``state`` with the statistics frozen (``False``) or learning (``True``).

    The flag lives in the state, so it reaches the adapter's wrapper under
    other wrappers (``LogWrapper``, a ``VecEnv``, Brax's trainers) whose
    ``step`` does not take it. It is a scalar boolean, possibly traced; a
    state batched by an outer ``jax.vmap`` also takes one flag per
    environment (the flag's batched shape), and with statistics shared
    through an ``axis_name`` an environment whose flag is false only withholds
    its own returns from the shared merge.

    Raises:
      ValueError: if the state holds no transform state, or ``update_stats``
        has a shape other than ``()`` or the state's flag's.
      TypeError: if ``update_stats`` is no flag (a string, a complex number).
    """
    transform_state, current = _read(state)
    shape = jnp.shape(current)
    flag = jnp.asarray(checks.check_update_stats(update_stats, shapes=((), shape)), bool)
    return _write(state, transform_state, jnp.broadcast_to(flag, shape))


def check_concrete_values(transform_state: PyTree, name: str) -> None:
    """Refuses a transform state of shapes alone, or holding values no step produces.

    The values are those :func:`~rewardnorm_jax.load_state` checks (a NaN
    return or mean, a negative variance, ...). Under ``jit`` they are not
    known yet, and a traced state passes.

    Raises:
      ValueError: naming the argument and the first field found wrong.
    """
    leaves = jax.tree.leaves(transform_state)
    if any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves):
        raise ValueError(
            f"{name} holds shapes, not arrays (a state from jax.eval_shape?); pass the "
            "transform state of a run, e.g. get_transform_state(state)."
        )
    if not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        try:
            state_fields.check_values(transform_state)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None


def check_same_layout(expected: PyTree, given: PyTree, name: str) -> None:
    """Raises a ValueError unless two pytrees agree in structure, shapes and dtypes."""
    expected_def, given_def = jax.tree.structure(expected), jax.tree.structure(given)
    # jax annotates tree structures with a PyTreeDef alias that mypy cannot resolve.
    if expected_def != given_def:  # type: ignore[operator, unused-ignore]
        raise ValueError(
            f"{name} has structure {given_def}, expected {expected_def} (the "
            "structure of the state it replaces in this wrapper)."
        )
    for want, got in zip(jax.tree.leaves(expected), jax.tree.leaves(given), strict=True):
        if jnp.shape(want) != jnp.shape(got) or jnp.result_type(want) != jnp.result_type(got):
            raise ValueError(
                f"{name} has a leaf of shape {jnp.shape(got)} and dtype "
                f"{jnp.result_type(got)}, expected shape {jnp.shape(want)} and dtype "
                f"{jnp.result_type(want)}."
            )


def keep_stats(fresh: PyTree, stats_from: PyTree) -> PyTree:
    """``stats_from`` with its tracked returns taken from ``fresh``.

    Every per-environment field (declared by the state: the tracked discounted
    return of :class:`~rewardnorm_jax.NormalizeRewardState` and of the
    percentile scaler's state) comes from ``fresh``, a newly initialised
    transform state, so the returns restart at zero and may have another batch
    size. Everything else (running statistics, percentiles, the running max of
    ``|G|``) comes from ``stats_from`` and must match ``fresh`` in shape and dtype.

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

    per_env = state_fields.per_env_mask(fresh)
    returns = state_fields.per_env_leaves(fresh)
    copies = jnp.shape(returns[0])[:1] if returns else ()  # the vmapped copies, if any

    def pick(path, fresh_leaf, given_leaf, is_per_env):
        if is_per_env:
            return fresh_leaf
        if jnp.shape(fresh_leaf) != jnp.shape(given_leaf) or (
            jnp.result_type(fresh_leaf) != jnp.result_type(given_leaf)
        ):
            raise ValueError(
                f"stats_from{jax.tree_util.keystr(path)} has shape {jnp.shape(given_leaf)} "
                f"and dtype {jnp.result_type(given_leaf)}, expected shape "
                f"{jnp.shape(fresh_leaf)} and dtype {jnp.result_type(fresh_leaf)} "
                "(only the tracked returns may change batch size)."
                + _vmapped_hint(jnp.shape(fresh_leaf), jnp.shape(given_leaf), copies)
            )
        return given_leaf

    return jax.tree_util.tree_map_with_path(pick, fresh, stats_from, per_env)


def _vmapped_hint(
    expected: tuple[int, ...], given: tuple[int, ...], copies: tuple[int, ...]
) -> str:
    """How to pass statistics between states batched by ``jax.vmap``, where the shapes say so.

    Statistics that differ only in their leading axis, which has the length of
    the fresh returns' leading axis (``copies``), may be copies held by one
    wrapper per environment under a ``jax.vmap`` (with an ``axis_name``): their
    leading axis is the batch, and another batch size is another length.
    """
    if not (
        expected
        and given
        and len(expected) == len(given)
        and expected[1:] == given[1:]
        and expected[:1] == copies
    ):
        return ""
    return (
        f" If both states come from a jax.vmap over wrappers of one environment each (a "
        f"leading axis of {given[0]} copies where the state has {expected[0]}), pass one "
        "environment's transform state under the map instead: jax.vmap(with_stats_from, "
        "in_axes=(0, None))(state, jax.tree.map(lambda x: x[0], stats_from))."
    )
