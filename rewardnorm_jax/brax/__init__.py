"""Brax and MuJoCo Playground adapter (``import rewardnorm_jax.brax``).

API:

* ``RewardTransformWrapper(env, transform, *, axis_name=None, per_env=False, task_of=None)``:
  a ``brax.envs.Wrapper`` passing ``state.reward`` through any
  :class:`~rewardnorm_jax.RewardTransform`; termination is ``done`` without
  ``info["truncation"]``; the raw reward stays in ``state.metrics["raw_reward"]``.
  ``NormalizeReward(env, gamma=0.99, epsilon=1e-8, *, semantics="gymnasium",
  ..., per_env=False, **options)`` builds it on
  :func:`rewardnorm_jax.normalize_reward`.
* ``wrap_env_fn(transform, wrap=brax.envs.training.wrap, *, task_of=None)``: the ``wrap_env_fn``
  of Brax's trainers (``ppo.train``, ``sac.train``), the transform outermost;
  ``RawRewardEvaluation(env)`` as ``eval_env`` keeps evaluation on raw rewards.
* ``get_transform_state(state)``, ``set_transform_state(state, ts)``,
  ``with_stats_from(state, ts)``, ``set_update_stats(state, flag)``: the
  transform state and freeze flag held in ``state.info``.
* ``from_running_statistics(brax_state)`` -> ``(normalizer, state)`` and
  ``to_running_statistics(config, state)``: Brax's observation statistics
  (``params[0]`` of its trainers) to and from
  :func:`rewardnorm_jax.normalize_observation`'s, counts exact, mode
  (``"brax"`` / ``"brax_ema"`` preset) and ``std_eps`` kept.
* ``policy_function(make_policy, params, *, deterministic=True, std_min=1e-6,
  std_max=1e6)``: a trained
  Brax policy as one pure, exportable function of the raw observation, its
  normalizer (``params[0]``) inside as the library's; ``with_normalizer(params,
  config, state)``: a library-trained normalizer in the ``params`` of Brax's
  ``make_policy``.

MuJoCo Playground environments have the same ``State`` fields; pass
``wrap=mujoco_playground.wrapper.wrap_for_brax_training`` to ``wrap_env_fn``.

Only this subpackage imports Brax; the top-level package exports none of it.
"""

from rewardnorm_jax._src.core.adapter import (
    get_transform_state,
    set_transform_state,
    set_update_stats,
    with_stats_from,
)
from rewardnorm_jax._src.core.extras import requires

with requires("brax", __name__):
    from rewardnorm_jax.brax._export import policy_function, with_normalizer
    from rewardnorm_jax.brax._running_statistics import (
        from_running_statistics,
        to_running_statistics,
    )
    from rewardnorm_jax.brax._wrapper import (
        NormalizeReward,
        RawRewardEvaluation,
        RewardTransformWrapper,
        wrap_env_fn,
    )

__all__ = [
    "NormalizeReward",
    "RawRewardEvaluation",
    "RewardTransformWrapper",
    "from_running_statistics",
    "get_transform_state",
    "policy_function",
    "set_transform_state",
    "set_update_stats",
    "to_running_statistics",
    "with_normalizer",
    "with_stats_from",
    "wrap_env_fn",
]
