"""What every suite's observation wrapper shares: its state, and reading it through a stack.

An observation wrapper keeps :func:`~rewardnorm_jax.normalize_observation`'s
state beside the wrapped environment's, in :class:`ObservationWrapperState`,
and calls the normalizer's ``step`` on every observation ``reset`` and
``step`` return (Gymnasium's, SB3's and PureJaxRL's wrappers update at reset
too). The helpers follow ``env_state`` through any wrapper stack, so a reward
wrapper outside (or ``LogWrapper``) does not hide the statistics.
"""

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.core.adapter import (
    batch_shape_of_key,
    check_same_layout,
    check_task_of,
)
from rewardnorm_jax._src.observation.normalizer import (
    ObservationNormState,
    check_state,
    normalize_observation,
)
from rewardnorm_jax._src.stats.running import participants

PyTree = Any


class ObservationWrapperState(struct.PyTreeNode):
    """State of an observation-normalizing wrapper: inner state, statistics, freeze flag."""

    env_state: PyTree  # the wrapped environment's state
    obs_state: ObservationNormState  # the observation statistics
    update_stats: jax.Array  # bool (), False freezes the statistics on every step


class ObservationWrapper:
    """What every suite's ``NormalizeObservation`` shares: normalizer, placement, reset, step.

    Subclasses list their suite's wrapper class after this one, whose
    ``__init__(env)`` it calls. A suite's ``step`` (and ``reset``, where the
    inner one takes more than a key) passes the inner environment's result to
    :meth:`_reset_result` or :meth:`_step_result`; :meth:`_unpack` and
    :meth:`_repack` say where a result holds the observations and the state,
    ``(obs, state, *rest)`` unless a suite says otherwise.
    """

    _env: Any  # the wrapped environment, set by the suite's wrapper class

    def __init__(
        self,
        env,
        preset: str = "gymnasium",
        *,
        axis_name: Any = None,
        per_env: bool = False,
        task_of: Any = None,
        **options,
    ):
        """Wraps ``env``; ``preset`` and ``options`` are ``normalize_observation``'s.

        ``options["statistics"]`` (a :class:`~rewardnorm_jax.Statistics`) says
        where the statistics live within the observations the wrapper sees:
        around a batch, ``Statistics(per_env=True)`` keeps one set per
        environment of it, and ``Statistics(num_tasks=K)`` one per task, with
        ``task_of(env_state)`` giving each environment's task id (shape: the
        batch's). ``per_env`` says where the wrapper itself lives: a wrapper
        reset with one environment's key needs ``axis_name`` (one set merged
        across a named ``jax.vmap``) or ``per_env=True`` (its own set: one per
        environment under an unnamed ``jax.vmap``, or a single environment),
        which ``Statistics(per_env=True)`` also says.

        Raises:
          ValueError: for ``task_of`` without per-task statistics, or per-task
            statistics without ``task_of``.
          TypeError: for a ``task_of`` that is not callable.
        """
        super().__init__(env)  # type: ignore[call-arg]  # the suite's wrapper class, next in the MRO
        self.normalizer = normalize_observation(preset, axis_name=axis_name, **options)
        self.per_env = per_env
        self.task_of = check_task_of(task_of, self.normalizer)

    def reset(
        self,
        key: jax.Array,
        stats_from: ObservationNormState | None = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> Any:
        """Resets the environment; the statistics start fresh or from ``stats_from``.

        Args:
          key: reset key; one per environment for a batched environment.
          stats_from: observation statistics to continue from
            (``get_observation_state(state)``), or ``None`` for fresh ones;
            of the wrapper's placement (shared, per environment or per task).
          update_stats: scalar flag; ``False`` freezes the statistics for
            every step of this state (evaluation).

        Raises:
          ValueError: naming ``stats_from``, for statistics of another
            placement, prior or shape.
        """
        return self._reset_result(self._env.reset(key), key, stats_from, update_stats)

    def _reset_result(self, result, key, stats_from, update_stats):
        """The inner reset's ``result``, normalized, with the wrapper's state.

        The statistics start fresh, or from ``stats_from``; ``key`` is the
        reset's: one per environment of a batch, or one environment's.
        """
        observations, env_state = self._unpack(result)
        update_stats = check_flag(update_stats)
        batch_shape = batch_shape_of_key(key)
        check_placement(
            type(self).__name__,
            len(batch_shape),
            self.normalizer.config.axis_name,
            self.per_env,
            self.normalizer.config.statistics.per_env,
        )
        obs_state = stats_from
        if obs_state is None:
            one = one_observation(observations, len(batch_shape))
            obs_state = self.normalizer.init(one, batch_shape)
        else:  # statistics of another placement are named as the argument given
            check_state(self.normalizer.config, obs_state, "stats_from")
        observations, obs_state = self.normalizer.step(
            obs_state, observations, update_stats, **self._task(env_state)
        )
        return self._repack(
            result, observations, ObservationWrapperState(env_state, obs_state, update_stats)
        )

    def _step_result(self, state, result, update_stats):
        """The inner step's ``result``, normalized, with the wrapper's state."""
        observations, env_state = self._unpack(result)
        flag = check_flag(update_stats) & state.update_stats
        observations, obs_state = self.normalizer.step(
            state.obs_state, observations, flag, **self._task(env_state)
        )
        return self._repack(
            result, observations, state.replace(env_state=env_state, obs_state=obs_state)
        )

    def _task(self, env_state) -> dict[str, Any]:
        """``{"task": task_of(env_state)}`` with per-task statistics, else ``{}``."""
        return {} if self.task_of is None else {"task": self.task_of(env_state)}

    @staticmethod
    def _unpack(result) -> tuple[PyTree, PyTree]:
        """The observations and the environment state of a reset's or step's ``result``."""
        return result[0], result[1]

    @staticmethod
    def _repack(result, observations: PyTree, state: "ObservationWrapperState") -> Any:
        """``result`` with ``observations`` and the wrapper's ``state`` in the inner ones' place."""
        return (observations, state, *result[2:])


def one_observation(observations: PyTree, batch_ndim: int) -> PyTree:
    """The shapes of one observation: every leaf without its ``batch_ndim`` leading axes."""
    return jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf)[batch_ndim:], jnp.result_type(leaf)),
        observations,
    )


def check_placement(
    wrapper: str, batch_ndim: int, axis_name, per_env: bool, stats_per_env: bool = False
) -> None:
    """Refuses, at trace time, a one-environment wrapper whose statistics' place is unsaid.

    Reset with one environment's key and no ``axis_name``, a wrapper would
    learn from that environment alone; under an unnamed ``jax.vmap`` every
    environment would silently keep its own statistics. The wrapper's
    ``per_env=True``, or statistics built with ``Statistics(per_env=True)``
    (``stats_per_env``), say that this is meant.

    Raises:
      ValueError: naming the three placements; for an unbound ``axis_name``,
        which maps bind it; for ``per_env=True`` around a batch.
    """
    participants(axis_name)  # an unbound name is refused here, at the reset
    if per_env and batch_ndim:
        raise ValueError(
            f"{wrapper} has per_env=True but was reset with one key per environment of a "
            "batch: per_env is for a wrapper serving one environment. For one set of "
            "statistics per environment of the batch, pass "
            "statistics=rn.Statistics(per_env=True) instead."
        )
    if batch_ndim == 0 and axis_name is None and not (per_env or stats_per_env):
        raise ValueError(
            f"{wrapper} was reset with the key of one environment and no axis_name, so it "
            "would keep statistics of that environment alone; under a jax.vmap every "
            "environment would silently get its own. Choose one: wrap the batched "
            "environment (one set shared by the batch); pass axis_name='envs' and vmap with "
            "the same axis name (one set merged across the axis); or pass per_env=True (one "
            "set per environment, or a single environment)."
        )


def check_flag(update_stats) -> jax.Array:
    """``update_stats`` checked (a scalar flag, Python or traced) as a bool array."""
    return jnp.asarray(checks.check_update_stats(update_stats), bool)


def _outermost(state: PyTree) -> ObservationWrapperState:
    while not isinstance(state, ObservationWrapperState):
        if not hasattr(state, "env_state"):
            raise ValueError(
                f"no observation statistics found in a state of type {type(state).__name__}: "
                "pass the state of a NormalizeObservation wrapper, or of a wrapper stack "
                "containing one."
            )
        state = state.env_state
    return state


def get_observation_state(state: PyTree) -> ObservationNormState:
    """The observation statistics of the outermost ``NormalizeObservation`` in a stack.

    Raises:
      ValueError: if the stack holds no observation wrapper.
    """
    return _outermost(state).obs_state


def _replace(state: PyTree, **fields) -> PyTree:
    if isinstance(state, ObservationWrapperState):
        return state.replace(**fields)
    return state.replace(env_state=_replace(state.env_state, **fields))


def set_observation_state(state: PyTree, obs_state: ObservationNormState) -> PyTree:
    """``state`` with the outermost observation statistics replaced (e.g. from a checkpoint).

    Raises:
      ValueError: if the stack holds no observation wrapper, or the replacement
        differs in structure, shape or dtype.
    """
    check_same_layout(get_observation_state(state), obs_state, "obs_state")
    return _replace(state, obs_state=obs_state)


def set_observation_update_stats(state: PyTree, update_stats) -> PyTree:
    """``state`` with the outermost observation statistics frozen (``False``) or learning."""
    _outermost(state)
    return _replace(state, update_stats=check_flag(update_stats))
