"""The transform builder: a transform's math, wrapped once in the checks of its inputs.

A transform module writes its math as module-level functions of its
configuration, taking inputs already checked:

* ``init(config, batch_shape) -> state``;
* ``apply(config, state, reward, task) -> reward``;
* ``step(config, state, inputs: StepInputs) -> (reward, state)``.

:func:`make_transform` turns them into a :class:`~rewardnorm_jax.RewardTransform`
whose functions check, at trace time and for every transform alike: the
batch shape, the state (its layout against ``init``'s), the reward's kind
and shape, each flag's kind and shape, ``update_stats``, and the task ids of
a keyed transform (refused by any other). ``update`` is ``step``'s new state.
"""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rewardnorm_jax._src.core import checks, state_fields
from rewardnorm_jax._src.core.base import (
    Config,
    EmptyState,
    PyTree,
    RewardTransform,
    Shape,
    ShapeLike,
    StepInputs,
    Unchecked,
)


def make_transform(
    config: Config,
    init: Callable[..., PyTree],
    apply: Callable[..., jax.Array],
    step: Callable[..., tuple[jax.Array, PyTree]],
    *,
    num_tasks: int | None = None,
    components: int = 0,
    per_env: bool = False,
) -> RewardTransform:
    """A :class:`~rewardnorm_jax.RewardTransform` of a transform's math, its inputs checked.

    Args:
      config: the transform's configuration (its options, already checked).
      init: ``init(config, batch_shape) -> state``, ``batch_shape`` a tuple.
      apply: ``apply(config, state, reward, task) -> reward``.
      step: ``step(config, state, inputs) -> (reward, state)``, ``inputs`` a
        :class:`~rewardnorm_jax._src.core.base.StepInputs`.
      num_tasks: ``None``, or the number of tasks of keyed statistics: every
        call then needs ``task``, ids of the environments' shape (the
        rewards' without their ``components`` axes) or a leading part of it.
      components: trailing reward axes that are components of one environment.
      per_env: whether every statistic belongs to one environment.
    """
    unchecked = Unchecked(functools.partial(apply, config), functools.partial(step, config))

    def checked_init(batch_shape: ShapeLike = ()) -> PyTree:
        return init(config, checks.check_batch_shape(batch_shape))

    def checked_shape(state: PyTree, reward) -> Shape:
        """The batch shape, after checking the state against ``init``'s for it.

        A state's per-environment fields give it; a state without any (a
        stateless one, or one of statistics alone) takes the rewards'.
        """
        shape = state_fields.batch_shape(state)
        shape = jnp.shape(reward) if shape is None else shape
        checks.check_state(state, checks.expected_layout(checked_init, shape), shape, config)
        return shape

    def checked_task(task, shape: Shape) -> jax.Array | None:
        if num_tasks is None:
            checks.refuse_task(task, config.name)
            return None
        env_shape = shape[: len(shape) - components]
        if task is None:
            raise ValueError(
                f"{config.name} keeps one set of statistics per task (num_tasks={num_tasks}) "
                "and needs each environment's task id on every call: pass task=ids (integers "
                f"in [0, {num_tasks}), shape {env_shape}), e.g. t.step(state, reward, "
                "terminated, truncated, task=ids); an adapter's wrapper reads them with task_of=."
            )
        return checks.check_task(task, env_shape, num_tasks, "environment", leading=True)

    def checked_apply(state, reward, *, task=None):
        checks.check_reward("reward", reward)
        shape = checked_shape(state, reward)
        checks.check_step_shapes(shape, reward)
        return unchecked.apply(state, reward, checked_task(task, shape))

    def checked_step(
        state,
        reward,
        terminated=False,
        truncated=False,
        update_stats=True,
        *,
        active=None,
        task=None,
    ):
        flags = {"terminated": terminated, "truncated": truncated, "active": active}
        checks.check_step_kinds(reward, **flags)
        checks.check_update_stats(update_stats)
        shape = checked_shape(state, reward)
        checks.check_step_shapes(shape, reward, **flags)
        inputs = StepInputs(
            reward, terminated, truncated, update_stats, active, checked_task(task, shape)
        )
        return unchecked.step(state, inputs)

    def update(state, reward, terminated=False, truncated=False, *, active=None, task=None):
        return checked_step(state, reward, terminated, truncated, active=active, task=task)[1]

    return RewardTransform(
        checked_init,
        update,
        checked_apply,
        checked_step,
        config,
        num_tasks,
        components,
        per_env,
        unchecked,
    )


def stateless(fn: Callable[[jax.Array], jax.Array], config: Config) -> RewardTransform:
    """A :class:`~rewardnorm_jax.RewardTransform` applying an elementwise function to rewards.

    Its state is :class:`~rewardnorm_jax.EmptyState`; ``step`` and ``apply``
    are ``fn``, which must keep the rewards' shape (a reduction or broadcast
    would mix environments).
    """

    def apply(config: Config, state: EmptyState, reward, task) -> jax.Array:
        reward = jnp.asarray(reward)
        out = fn(reward)
        if jnp.shape(out) != reward.shape:
            raise ValueError(
                f"{config.name} must map rewards elementwise, but its function turns shape "
                f"{reward.shape} into {jnp.shape(out)}."
            )
        return out

    def step(config: Config, state: EmptyState, inputs: StepInputs):
        return apply(config, state, inputs.reward, None), state

    return make_transform(config, lambda config, shape: EmptyState(), apply, step, per_env=True)
