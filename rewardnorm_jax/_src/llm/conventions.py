"""The trainers' conventions for group advantages, as data: one :class:`Convention` each.

A convention is one trainer's formula in exact arithmetic: the ddof of its
standard deviations, the epsilon added to them, what a group of one answer
gives, and what a NaN reward does. The library computes each one accurately
(:mod:`~rewardnorm_jax._src.llm.moments`), so that where the trainer's own
float32 code leaves a residue (a constant group), the convention gives its
exact value, 0.
"""

import dataclasses

ESTIMATORS = (
    "grpo",
    "dr_grpo",
    "batch_std",
    "rloo",
    "rloo_vectorized",
    "opo",
    "reinforce_pp_baseline",
    "gdpo",
    "gpg",
)
"""Every estimator, in the order of the documentation."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """One trainer's arithmetic.

    Attributes:
      ddof: the delta degrees of freedom of every standard deviation (1:
        Bessel's correction, ``torch.std``'s default).
      epsilon: added to a standard deviation before dividing by it.
      singleton: what a group of one answer gives:

        * ``"zero"``: advantage 0;
        * ``"own"``: the group's mean is taken as 0 and its standard
          deviation as 1, so the answer keeps its reward (verl);
        * ``"refused"``: the trainer refuses groups of one (Tunix's
          ``GRPOConfig``, OpenRLHF's launcher): ``group_size=1`` is an error,
          and a group of one among ragged ids gets NaN.

      invalid: what a NaN (or infinite) reward does:

        * ``"dropped"``: left out of every statistic, its advantage NaN
          (the library's default: a loss that masks it sees it);
        * ``"zeroed"``: left out of every statistic, its advantage 0 (TRL);
        * ``"spreads"``: its group's statistics are NaN, so all the group's
          advantages are (verl, OpenRLHF, and Tunix's estimators; Tunix's
          reward manager sums the reward functions with ``np.nansum`` first,
          so a NaN reaches them as 0).

      estimators: the estimators the trainer has.
    """

    name: str
    ddof: int
    epsilon: float
    singleton: str
    invalid: str
    estimators: tuple[str, ...]


CONVENTIONS = {
    convention.name: convention
    for convention in (
        Convention("exact", 1, 0.0, "zero", "dropped", ESTIMATORS),
        Convention(
            "trl", 1, 1e-4, "zero", "zeroed", ("grpo", "dr_grpo", "batch_std", "rloo", "gdpo")
        ),
        # verl has every estimator but TRL's batch standard deviation.
        Convention(
            "verl", 1, 1e-6, "own", "spreads", tuple(e for e in ESTIMATORS if e != "batch_std")
        ),
        Convention("tunix", 1, 1e-6, "refused", "spreads", ("grpo", "dr_grpo", "rloo")),
        Convention(
            "openrlhf",
            1,
            1e-9,
            "refused",
            "spreads",
            ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"),
        ),
    )
}
"""The conventions by name: the library's ``"exact"`` and one per trainer."""
