"""The trainers' conventions for group advantages, as data: one :class:`Convention` each.

A convention is one trainer's formula in exact arithmetic: the ddof of its
standard deviations, the epsilon and where it sits, the mean the standard
deviation is taken about, what a group of one answer gives, and what a NaN
reward does. The library computes each one accurately
(:mod:`~rewardnorm_jax._src.llm.moments`), so that where the trainer's own
float32 code leaves a residue (a constant group), the convention gives its
exact value, 0.
"""

import dataclasses
import math

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
    "maxrl",
    "rloo_std",
    "normalized",
)
"""Every estimator, in the order of the documentation."""

LEVELS = ("group", "batch", "running", "none")
"""Where a mean or a standard deviation is taken: group, batch, running statistics, none."""

PRESETS = {
    "grpo": ("group", False, "group"),
    "dr_grpo": ("group", False, "none"),
    "reinforce_pp_baseline": ("group", False, "none"),
    "batch_std": ("group", False, "batch"),
    "rloo": ("group", True, "none"),
    "rloo_vectorized": ("group", True, "none"),
}
"""The estimators that are levels (``normalized``'s options): ``(mean, leave_one_out, std)``."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """One trainer's arithmetic.

    Attributes:
      ddof: the default delta degrees of freedom of every standard
        deviation (1: Bessel's correction, ``torch.std``'s default; AReaL's
        ``std_unbiased``).
      epsilon: added to a standard deviation before dividing by it
        (``epsilon_at="std"``), or to the variance under its square root
        (``"variance"``).
      centring: the mean a ``"batch"`` or ``"group"`` standard deviation is
        taken about:

        * ``"own"``: its own set's mean (``torch.std`` of the rewards: TRL,
          ROLL, verl);
        * ``"mean"``: the mean the advantages subtract, whatever its level
          (AReaL's ``_compute_std(x, mask, mean)``): with ``mean="none"``,
          the root mean square of the rewards.

      singleton: what a group of one answer gives:

        * ``"zero"``: advantage 0;
        * ``"own"``: the group's mean is taken as 0 and its standard
          deviation as 1, so the answer keeps its reward (verl);
        * ``"refused"``: the trainer refuses groups of one (Tunix's
          ``GRPOConfig``, OpenRLHF's launcher): ``group_size=1`` is an error,
          and a group of one among ragged ids gets NaN;
        * ``"unit"``: its leave-one-out mean is 0 and its ddof-1 standard
          deviation 1; its own mean is itself (AReaL's special cases);
        * ``"formula"``: as the formula gives it: its mean is itself and its
          ddof-1 standard deviation NaN (``0 / 0``, ``torch.std`` of one value:
          ROLL), so it gets 0 unstandardized and NaN standardized.

      invalid: what a NaN (or infinite) reward does:

        * ``"dropped"``: left out of every statistic, its advantage NaN
          (the library's default: a loss that masks it sees it);
        * ``"zeroed"``: left out of every statistic, its advantage 0 (TRL);
        * ``"spreads"``: its group's statistics are NaN, so all the group's
          advantages are (verl, OpenRLHF, and Tunix's estimators; Tunix's
          reward manager sums the reward functions with ``np.nansum`` first,
          so a NaN reaches them as 0).

      estimators: the estimators the trainer has.
      centring: see above (``"own"`` but for AReaL's).
      epsilon_at: ``"std"`` (every trainer's) or ``"variance"``.
      first_running_std: the running standard deviation of a domain that
        has seen ``ddof`` rewards or fewer (but one at least): NaN, or
        ``inf`` (ROLL: its prior of count :math:`10^{-24}` makes the unbiased
        variance of one reward a positive number over 0), so that its
        advantage is 0.
    """

    name: str
    ddof: int
    epsilon: float
    singleton: str
    invalid: str
    estimators: tuple[str, ...]
    centring: str = "own"
    epsilon_at: str = "std"
    first_running_std: float = math.nan


CONVENTIONS = {
    convention.name: convention
    for convention in (
        Convention("exact", 1, 0.0, "zero", "dropped", ESTIMATORS),
        Convention(
            "trl", 1, 1e-4, "zero", "zeroed", ("grpo", "dr_grpo", "batch_std", "rloo", "gdpo")
        ),
        # verl's core_algos: the estimators up to gpg, but TRL's batch standard deviation.
        Convention(
            "verl",
            1,
            1e-6,
            "own",
            "spreads",
            (
                "grpo",
                "dr_grpo",
                "rloo",
                "rloo_vectorized",
                "opo",
                "reinforce_pp_baseline",
                "gdpo",
                "gpg",
            ),
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
        # inclusionAI/AReaL 4aef98d8d818af55b43621aaadba047ae10f4e77, areal/utils/data.py
        # Normalization (NormConfig in areal/api/cli_args.py): eps 1e-5, std about the mean.
        Convention(
            "areal",
            1,
            1e-5,
            "unit",
            "spreads",
            ("normalized", "grpo", "dr_grpo", "rloo"),
            centring="mean",
        ),
        # alibaba/ROLL 8eb27cc2dc34c4d1310b169d9b86d339004d811a, roll/utils/functionals.py
        # reward_norm: eps 1e-6, torch.std about each set's own mean.
        Convention(
            "roll",
            1,
            1e-6,
            "formula",
            "spreads",
            ("normalized", "grpo", "dr_grpo", "batch_std"),
            first_running_std=math.inf,
        ),
        # NovaSky-AI/SkyRL a9564572eb8e91076be43c1bd5e4615e3de17265,
        # skyrl/backends/skyrl_train/utils/ppo_utils.py compute_maxrl_advantage.
        Convention("skyrl", 1, 1e-6, "own", "spreads", ("maxrl",)),
        # NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909, nemo_rl/algorithms/
        # advantage_estimator.py GRPOAdvantageEstimator and utils.py
        # calculate_baseline_and_std_per_prompt.
        Convention("nemo_rl", 1, 1e-6, "zero", "spreads", ("grpo", "dr_grpo", "rloo", "rloo_std")),
    )
}
"""The conventions by name: the library's ``"exact"`` and one per trainer."""
