"""Every adapter's ``NormalizeReward``: :func:`~rewardnorm_jax.normalize_reward`, wrapped."""

from collections.abc import Callable
from typing import Any

import jax

from rewardnorm_jax._src.core import adapter
from rewardnorm_jax._src.reward.normalize import normalize_reward
from rewardnorm_jax._src.stats.placement import SHARED, Statistics


class NormalizeRewardWrapper(adapter.TransformWrapper):
    """Every adapter's ``NormalizeReward``: :func:`~rewardnorm_jax.normalize_reward`, wrapped."""

    def __init__(
        self,
        env: Any,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        *,
        semantics: Any = "gymnasium",
        statistics: Statistics = SHARED,
        dtype: Any = None,
        axis_name: Any = None,
        g_max: Any = None,
        finite_rewards: bool = False,
        per_env: bool = False,
        task_of: Callable[[Any], jax.Array] | None = None,
    ):
        """Wraps ``env``; the arguments are :func:`~rewardnorm_jax.normalize_reward`'s.

        Args:
          env: the wrapped environment (single or batched).
          gamma: discount factor in [0, 1].
          epsilon: added to the variance, > 0.
          semantics: ``"gymnasium"`` (default), ``"purejaxrl"``, ``"sb3"``,
            ``"gymnasium_same_step"``, ``"non_episodic"`` or a
            :class:`~rewardnorm_jax.Semantics` (which carries the clip: 10 for
            ``"sb3"``, none otherwise).
          statistics: where the statistics live and how they weigh the past,
            a :class:`~rewardnorm_jax.Statistics`; default one set shared by the batch.
          dtype: float32 or float64 statistics; default float64 under x64.
          axis_name: name of a mapped axis (``jax.vmap``/``pmap``/``shard_map``)
            to share the statistics across, for a per-environment wrapper.
          g_max: ``None``, or the bound on the normalized return (SimbaV2).
          finite_rewards: the caller's promise that every reward is finite.
          per_env: for a wrapper serving one environment without ``axis_name``:
            keep statistics of that environment alone (one set per environment
            under an unnamed ``jax.vmap``); ``Statistics(per_env=True)`` says the same.
          task_of: with ``Statistics(num_tasks=K)``, a function of the wrapped
            environment's state returning each environment's task id
            (integers in ``[0, K)``, one per environment): every step merges
            each return into its task's statistics (see
            :class:`~rewardnorm_jax._src.core.adapter.TransformWrapper`).

        Raises:
          ValueError: for an invalid hyperparameter (see
            :func:`~rewardnorm_jax.normalize_reward`), or ``task_of`` without
            per-task statistics (or per-task statistics without ``task_of``).
          TypeError: if ``task_of`` is not callable.
        """
        transform = normalize_reward(
            gamma,
            epsilon,
            semantics=semantics,
            statistics=statistics,
            dtype=dtype,
            axis_name=axis_name,
            g_max=g_max,
            finite_rewards=finite_rewards,
        )
        super().__init__(env, transform, axis_name=axis_name, per_env=per_env, task_of=task_of)
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
