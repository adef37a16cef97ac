"""The library's group advantages as functions Tunix's learners call, registered by name."""

import functools
from collections.abc import Callable

import jax
import numpy as np
from tunix.rl import function_registry

from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.llm import CONVENTIONS, group_advantages

ESTIMATOR_NAMES = {
    **{
        f"rewardnorm_{estimator}": (estimator, "exact")
        for estimator in ("grpo", "dr_grpo", "batch_std", "rloo")
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
        ``"grpo"``, ``"dr_grpo"``, ``"batch_std"`` or ``"rloo"``
        (``"reinforce_pp_baseline"`` is ``"dr_grpo"`` until its whitening
        over tokens, which the hook cannot do).
      convention: a convention that has ``estimator``.
      standardize_batch: see :func:`rewardnorm_jax.group_advantages`.

    Returns:
      The function, to register with
      ``tunix.rl.function_registry.register_advantage_estimator(name)``.

    Raises:
      ValueError: for an option :func:`rewardnorm_jax.group_advantages`
        refuses, or an estimator Tunix cannot feed (``opo``, ``gdpo``,
        ``reinforce_pp_baseline``); the function raises for a
        ``num_generations`` that is not an integer the convention accepts.

    Example:
      >>> import numpy as np
      >>> from rewardnorm_jax.tunix import tunix_estimator
      >>> rloo = tunix_estimator("rloo", standardize_batch=True)
      >>> advantages = rloo(rewards=np.array([1.0, 0.0, 1.0, 1.0]), num_generations=2)
      >>> [round(a, 4) for a in advantages.tolist()]  # RLOO's [1, -1, 0, 0] over the batch
      [1.2247, -1.2247, 0.0, 0.0]
    """
    if estimator in ("opo", "gdpo", "reinforce_pp_baseline"):
        needs = {
            "opo": "lengths",
            "gdpo": "one reward per reward function",
            "reinforce_pp_baseline": "token masks (it whitens over tokens)",
        }[estimator]
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
        size = _group_size(num_generations, convention)
        if not isinstance(rewards, (np.ndarray, jax.Array)):
            rewards = np.asarray(rewards)
        return compiled(size)(rewards).advantages

    return estimate


def _group_size(num_generations, convention: str) -> int:
    """``num_generations`` as a Python int, checked against the convention's smallest group."""
    is_array = isinstance(num_generations, (np.ndarray, jax.Array))
    if (
        is_array
        and num_generations.shape == ()
        and np.issubdtype(num_generations.dtype, np.integer)
    ):
        num_generations = int(num_generations)
    smallest = 1 if CONVENTIONS[convention].singleton != "refused" else 2
    return checks.check_count("num_generations", num_generations, minimum=smallest)


for _name, (_estimator, _convention) in ESTIMATOR_NAMES.items():
    function_registry.register_advantage_estimator(_name)(
        tunix_estimator(_estimator, convention=_convention)
    )
