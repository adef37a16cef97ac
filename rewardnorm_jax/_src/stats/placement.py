"""Where a transform keeps its statistics, and how they weigh the past: one option."""

import dataclasses

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.core.base import Shape


@dataclasses.dataclass(frozen=True)
class Statistics:
    r"""Where statistics live and how they weigh the past: the ``statistics`` option.

    ==========================================  =====================================
    ``Statistics(...)``                         one set of statistics
    ==========================================  =====================================
    ``()`` (default)                            shared by every reward of the batch
    ``(per_env=True)``                          per reward of each environment
    ``(components=c)``                          per component: the rewards' last
                                                ``c`` axes (objectives, agents)
    ``(num_tasks=K)``                           per task, ids given on every call
    ``(num_tasks=K, components=c)``             per task and component
    ==========================================  =====================================

    Attributes:
      per_env: one set per reward of each environment (shape ``batch_shape``),
        for batches whose environments have reward scales of their own;
        with an ``axis_name``, environment :math:`i` of every participant
        shares a set (a position-wise ``psum``).
      components: how many trailing axes of the rewards are components of one
        environment's reward (objectives, or agents stacked along an axis),
        each with statistics of its own; the other axes are environments,
        which share them. 0: every reward shares one set, which keeps the
        ratios between components.
      num_tasks: ``None``, or the number :math:`K` of tasks (levels): one set
        per task, each environment's return merged into its task's set. Every
        ``step``, ``update`` and ``apply`` then takes ``task=``, the integer
        ids in ``[0, K)`` of the call's environments (the rewards' shape
        without their component axes, or a leading part of it).
      decay: ``None`` (cumulative statistics, as the references) or the
        per-update discount :math:`\beta \in [0, 1)` of exponential moving
        statistics (see :func:`rewardnorm_jax.init_stats`), for scales that drift.

    Raises:
      ValueError: for ``per_env`` with ``num_tasks`` or ``components`` (one set
        per reward already), a negative ``components``, ``num_tasks`` outside
        ``[1, 2**31 - 1]`` or a ``decay`` outside ``[0, 1)``.
      TypeError: for ``per_env`` that is not a bool, or counts that are not integers.

    Example:
      >>> Statistics(num_tasks=4).shape((16,))   # one set per task
      (4,)
      >>> Statistics(components=1).shape((16, 3))   # one per objective
      (3,)
    """

    per_env: bool = False
    components: int = 0
    num_tasks: int | None = None
    decay: float | None = None

    def __post_init__(self):
        per_env = checks.check_bool("per_env", self.per_env)  # a truthy string would not share
        components = checks.check_count("components", self.components, minimum=0)
        num_tasks = checks.check_num_tasks(self.num_tasks)
        if per_env and (num_tasks is not None or components):
            raise ValueError(
                f"per_env=True keeps one set of statistics per reward of each environment; "
                f"num_tasks={num_tasks!r} and components={components!r} share sets between "
                "environments: choose one."
            )
        decay = self.decay
        if decay is not None and not (checks.is_real(decay, "decay") and 0.0 <= decay < 1.0):
            raise ValueError(
                f"decay should be None (cumulative statistics) or in [0, 1), got decay={decay!r}."
            )
        object.__setattr__(self, "per_env", per_env)
        object.__setattr__(self, "components", components)
        object.__setattr__(self, "num_tasks", num_tasks)
        object.__setattr__(self, "decay", None if decay is None else float(decay))

    def shape(self, batch_shape: Shape) -> Shape:
        """The shape of the statistics for rewards of shape ``batch_shape``.

        Raises:
          ValueError: for a ``batch_shape`` with fewer axes than ``components``.
        """
        if len(batch_shape) < self.components:
            raise ValueError(
                f"batch_shape={batch_shape} has fewer axes than components={self.components}: "
                "the rewards' last `components` axes are their components (objectives, "
                "agents), e.g. batch_shape=(num_envs, num_objectives) with components=1."
            )
        if self.per_env:
            return batch_shape
        tasks = () if self.num_tasks is None else (self.num_tasks,)
        return tasks + batch_shape[len(batch_shape) - self.components :]

    def transform_fields(self) -> dict:
        """What a transform keeping these statistics declares, as ``make_transform``'s keywords.

        ``num_tasks``, ``components`` and ``per_env``: see
        :func:`~rewardnorm_jax._src.core.builder.make_transform`.
        """
        return {"num_tasks": self.num_tasks, "components": self.components, "per_env": self.per_env}

    def env_task(self, task, batch_shape: Shape):
        """Checked task ids spread over the environments' shape; ``None`` without tasks.

        The environments' shape is ``batch_shape`` without its ``components``
        axes; ids of a leading part of it serve every entry they lead.
        """
        if task is None:
            return None
        return checks.spread(task, batch_shape[: len(batch_shape) - self.components])


SHARED = Statistics()
"""The default: one set of cumulative statistics, shared by every reward of the batch."""
