"""The library's group advantages as functions Tunix's learners call, registered by name."""

import functools
from collections.abc import Callable

import jax
from tunix.rl import function_registry

from rewardnorm_jax._src.group.advantages import group_advantages

ESTIMATOR_NAMES = {
    **{
        f"rewardnorm_{estimator}": (estimator, "exact")
        for estimator in ("grpo", "dr_grpo", "batch_std", "rloo", "reinforce_pp_baseline")
    },
    **{
        f"rewardnorm_{estimator}_tunix": (estimator, "tunix")
        for estimator in ("grpo", "dr_grpo", "rloo")
    },
}
"""The names registered in Tunix's registry: ``{name: (estimator, convention)}``."""


def tunix_estimator(
    estimator: str, *, convention: str = "exact", standardize_batch: bool = False
) -> Callable[..., jax.Array]:
    """A Tunix advantage estimator: ``fn(rewards=..., num_generations=...)`` -> advantages.

    The options are those of :func:`rewardnorm_jax.group_advantages`, with
    contiguous groups of ``num_generations`` answers, as Tunix lays them out.
    One compiled function serves each group size.

    Args:
      estimator: an estimator of contiguous groups without lengths:
        ``"grpo"``, ``"dr_grpo"``, ``"batch_std"``, ``"rloo"`` or
        ``"reinforce_pp_baseline"``.
      convention: a convention that has ``estimator``.
      standardize_batch: see :func:`rewardnorm_jax.group_advantages`.

    Returns:
      The function, to register with
      ``tunix.rl.function_registry.register_advantage_estimator(name)``.

    Raises:
      ValueError: for an option :func:`rewardnorm_jax.group_advantages`
        refuses, or an estimator Tunix cannot feed (``opo``, ``gdpo``).
    """
    if estimator in ("opo", "gdpo"):
        needs = "lengths" if estimator == "opo" else "one reward per reward function"
        raise ValueError(
            f"estimator={estimator!r} needs {needs}, which Tunix's learner does not pass to "
            "its estimator."
        )
    build = functools.partial(
        group_advantages, estimator, convention=convention, standardize_batch=standardize_batch
    )
    build(group_size=2)  # the options' errors, now

    @functools.cache
    def compiled(num_generations: int):
        return jax.jit(build(group_size=num_generations).apply)

    def estimate(rewards, num_generations: int) -> jax.Array:
        return compiled(num_generations)(rewards).advantages

    return estimate


for _name, (_estimator, _convention) in ESTIMATOR_NAMES.items():
    function_registry.register_advantage_estimator(_name)(
        tunix_estimator(_estimator, convention=_convention)
    )
