r"""Group-relative advantages: each answer's reward against the other answers to its prompt.

RL for language models samples :math:`G` answers per prompt and scores each
against its group: GRPO standardizes the rewards within the group, RLOO
subtracts the mean of the others, and so on. :func:`group_advantages` builds
one estimator with one trainer's convention
(:mod:`~rewardnorm_jax._src.llm.conventions`), and its ``apply`` maps the
rewards of a batch to advantages. With :math:`\bar r`, :math:`\sigma` and
:math:`n` the group's mean, standard deviation and number of valid answers:

.. math::

    \text{grpo:}\ \frac{r - \bar r}{\sigma + \epsilon} \qquad
    \text{dr\_grpo, reinforce\_pp\_baseline:}\ r - \bar r \qquad
    \text{batch\_std:}\ \frac{r - \bar r}{\sigma_B + \epsilon} \qquad
    \text{rloo, rloo\_vectorized:}\ \frac{n}{n - 1}(r - \bar r) \qquad
    \text{opo:}\ r - \frac{\sum_j \ell_j r_j}{\sum_j \ell_j} \qquad
    \text{gpg:}\ \frac{\alpha}{f_\text{norm}} (r - \bar r)

with :math:`\sigma_B` the standard deviation of the batch's rewards,
:math:`\ell` the answers' lengths, and :math:`\alpha = B / \max(m, 1)`, the
batch's :math:`B` answers over its :math:`m` nonzero rewards (GPG's
correction for groups without signal). ``gdpo`` takes one reward per reward
function, standardizes each within its group as ``grpo`` does, sums them with
``reward_weights``, and standardizes the sums over the batch.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from rewardnorm_jax._src.core import base, checkpoint_migration, checks
from rewardnorm_jax._src.llm import domains as domain_stats
from rewardnorm_jax._src.llm import layout as layouts
from rewardnorm_jax._src.llm.conventions import (
    CONVENTIONS,
    ESTIMATORS,
    LEVELS,
    PRESETS,
    Convention,
)
from rewardnorm_jax._src.llm.moments import Moments, deviations, moments, power_of_two
from rewardnorm_jax._src.llm.moments import variance as moment_variance
from rewardnorm_jax._src.stats import running as rs


class GroupAdvantages(NamedTuple):
    """What an estimator's ``apply`` returns, one entry per answer."""

    advantages: jax.Array  # floating (B,)
    # bool (B,): the answer's group has no spread (its valid rewards are equal)
    zero_variance: jax.Array


@dataclasses.dataclass(frozen=True)
class GroupAdvantageConfig(base.Config):
    """The options of :func:`group_advantages`, checked when it is built."""

    name: ClassVar[str] = "group_advantages"
    estimator: Any = None  # None: "normalized" if a level is set, else "grpo"
    convention: str = "exact"
    group_size: int | None = None
    num_groups: int | None = None
    groups_span_devices: bool | None = None
    reward_weights: Any = None  # a sequence of weights, stored as a tuple of floats
    standardize_batch: bool = False
    f_norm: Any = None  # gpg's divisor, stored as a float
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})
    mean: Any = None  # a level of LEVELS; a preset's for its estimators, None for the others
    std: Any = None
    leave_one_out: Any = None
    ddof: Any = None  # the convention's unless given
    epsilon: Any = None
    epsilon_at: Any = None
    num_domains: int | None = None
    std_floor: Any = None  # rloo_std's, stored as a float

    def __post_init__(self):
        estimator = self.estimator
        if estimator is None:
            named = self.mean is not None or self.std is not None
            estimator = "normalized" if named else "grpo"
        object.__setattr__(
            self, "estimator", checks.check_choice("estimator", estimator, ESTIMATORS)
        )
        checks.check_choice("convention", self.convention, tuple(CONVENTIONS))
        rules = CONVENTIONS[self.convention]
        if self.estimator not in rules.estimators:
            raise ValueError(
                f"convention={self.convention!r} has no estimator {self.estimator!r}; it has "
                f"{', '.join(rules.estimators)} (convention='exact' has them all)."
            )
        self._check_groups(rules)
        object.__setattr__(self, "axis_name", rs.check_axis_name(self.axis_name))
        self._check_span()
        object.__setattr__(self, "reward_weights", self._checked_weights())
        self._check_standardize_batch()
        object.__setattr__(self, "f_norm", self._checked_f_norm())
        self._set_levels()
        self._set_arithmetic(rules)

    def _set_levels(self) -> None:
        """``mean``, ``std`` and ``leave_one_out``: given (``normalized``) or the preset's."""
        given = {"mean": self.mean, "std": self.std, "leave_one_out": self.leave_one_out}
        if self.estimator != "normalized":
            if any(value is not None for value in given.values()):
                raise ValueError(
                    f"mean, std and leave_one_out are estimator='normalized''s options (the "
                    f"named estimators are presets of them), got estimator={self.estimator!r} "
                    f"with {', '.join(f'{k}={v!r}' for k, v in given.items() if v is not None)}."
                )
            mean, leave_one_out, std = PRESETS.get(self.estimator, (None, None, None))
        else:
            if self.mean is None or self.std is None:
                raise ValueError(
                    "estimator='normalized' takes both levels: mean and std, each one of "
                    f"{', '.join(map(repr, LEVELS))}, got mean={self.mean!r}, std={self.std!r}."
                )
            mean = checks.check_choice("mean", self.mean, LEVELS)
            std = checks.check_choice("std", self.std, LEVELS)
            leave_one_out = checks.check_bool(
                "leave_one_out", False if self.leave_one_out is None else self.leave_one_out
            )
            if leave_one_out and mean not in ("group", "batch"):
                raise ValueError(
                    f"leave_one_out=True leaves each answer out of its group's or batch's "
                    f"mean, got mean={mean!r}."
                )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "leave_one_out", leave_one_out)
        running = "running" in (mean, std)
        if running:
            if self.num_domains is not None:
                checks.check_count(
                    "num_domains", self.num_domains, minimum=1, maximum=checks.MAX_TASKS
                )
                if "batch" in (mean, std):
                    raise ValueError(
                        f"mean={mean!r} and std={std!r} with num_domains={self.num_domains!r}: "
                        "a batch level would take every domain's rewards; build one estimator "
                        "per domain (num_domains=None) and step each on its domain's rewards."
                    )
        elif self.num_domains is not None:
            raise ValueError(
                f"num_domains={self.num_domains!r} keys running statistics: it is for "
                "mean='running' or std='running'."
            )

    def _set_arithmetic(self, rules: Convention) -> None:
        """``ddof``, ``epsilon``, ``epsilon_at`` (the convention's unless given), ``std_floor``."""
        checks.check_static("ddof", self.ddof)
        ddof = rules.ddof if self.ddof is None else self.ddof
        if isinstance(ddof, bool) or ddof not in (0, 1):
            raise ValueError(f"ddof should be 0 or 1, got ddof={self.ddof!r}.")
        epsilon = rules.epsilon if self.epsilon is None else self.epsilon
        if not (checks.is_real(epsilon, "epsilon") and math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon should be a finite number >= 0, got epsilon={epsilon!r}.")
        epsilon_at = rules.epsilon_at if self.epsilon_at is None else self.epsilon_at
        checks.check_choice("epsilon_at", epsilon_at, ("std", "variance"))
        object.__setattr__(self, "ddof", int(ddof))
        object.__setattr__(self, "epsilon", float(epsilon))
        object.__setattr__(self, "epsilon_at", epsilon_at)
        floor = self.std_floor
        if floor is not None:
            if self.estimator != "rloo_std":
                raise ValueError(
                    f"std_floor is for estimator='rloo_std', got estimator={self.estimator!r} "
                    f"with std_floor={floor!r}."
                )
            if not (checks.is_real(floor, "std_floor") and math.isfinite(floor) and floor >= 0):
                raise ValueError(
                    f"std_floor should be a finite number >= 0, got std_floor={floor!r}."
                )
        elif self.estimator == "rloo_std":
            floor = 0.0
        object.__setattr__(self, "std_floor", None if floor is None else float(floor))

    @property
    def running(self) -> bool:
        """Whether a level is running statistics (the estimator then has a state)."""
        return "running" in (self.mean, self.std)

    def _check_groups(self, rules: Convention) -> None:
        if (self.group_size is None) == (self.num_groups is None):
            raise ValueError(
                "pass exactly one of group_size (contiguous groups of that many answers) and "
                "num_groups (groups named by group_ids in [0, num_groups), passed to apply), got "
                f"group_size={self.group_size!r}, num_groups={self.num_groups!r}."
            )
        if self.group_size is not None:
            minimum = 2 if rules.singleton == "refused" else 1
            checks.check_count("group_size", self.group_size, minimum=minimum)
        else:
            checks.check_count("num_groups", self.num_groups, minimum=1, maximum=checks.MAX_TASKS)

    def _check_span(self) -> None:
        if self.groups_span_devices is not None:
            checks.check_bool("groups_span_devices", self.groups_span_devices)
        if self.num_groups is None or self.axis_name is None:
            if self.groups_span_devices is not None:
                raise ValueError(
                    f"groups_span_devices={self.groups_span_devices!r} is for group ids with an "
                    "axis_name (num_groups and axis_name set); contiguous groups are whole on "
                    "each device, and without an axis_name there is one device."
                )
            return
        if self.groups_span_devices is None:
            raise ValueError(
                f"with group ids and axis_name={self.axis_name!r}, say whether an id names one "
                "group on every device (groups_span_devices=True: its answers' statistics are "
                "summed across the axis) or a group of this device alone "
                "(groups_span_devices=False: the same id on two devices is two groups)."
            )

    def _check_standardize_batch(self) -> None:
        checks.check_bool("standardize_batch", self.standardize_batch)
        if self.standardize_batch and (
            self.estimator == "gdpo" or self.convention not in ("exact", "trl")
        ):
            raise ValueError(
                "standardize_batch=True (TRL RLOO's normalize_advantages) is for the 'exact' "
                "and 'trl' conventions and every estimator but 'gdpo' (which standardizes over "
                f"the batch already), got estimator={self.estimator!r}, "
                f"convention={self.convention!r}."
            )

    def _checked_f_norm(self) -> float | None:
        if self.f_norm is None:
            return None
        if self.estimator != "gpg":
            raise ValueError(
                f"f_norm is for estimator='gpg', got estimator={self.estimator!r} with "
                f"f_norm={self.f_norm!r}."
            )
        if not (
            checks.is_real(self.f_norm, "f_norm") and math.isfinite(self.f_norm) and self.f_norm > 0
        ):
            raise ValueError(f"f_norm should be a finite number > 0, got f_norm={self.f_norm!r}.")
        return float(self.f_norm)

    def _checked_weights(self) -> tuple[float, ...] | None:
        if self.reward_weights is None:
            return None
        if self.estimator != "gdpo":
            raise ValueError(
                f"reward_weights is for estimator='gdpo' (several reward functions), got "
                f"estimator={self.estimator!r}."
            )
        weights = self.reward_weights
        checks.check_static("reward_weights", weights, "sequence of numbers")
        if isinstance(weights, (np.ndarray, jax.Array)) and np.ndim(weights) == 1:
            weights = tuple(np.asarray(weights).tolist())  # a concrete array: its numbers
        if not (
            isinstance(weights, (tuple, list))
            and weights
            and all(checks.is_real(w, "reward_weights") and math.isfinite(w) for w in weights)
        ):
            raise ValueError(
                "reward_weights should be a non-empty sequence of finite numbers, one per "
                f"reward function, got reward_weights={self.reward_weights!r}."
            )
        return tuple(float(w) for w in weights)


class GroupAdvantageEstimator(NamedTuple):
    """A group-advantage estimator: its ``apply`` and its checked configuration.

    ``apply(rewards, *, group_ids=None, lengths=None) -> GroupAdvantages``:

    * ``rewards``: one per answer, shape ``(B,)`` (``(B, K)`` for ``gdpo``:
      one per answer and reward function); any real dtype, 0/1 and booleans
      included.
    * ``group_ids``: with ``num_groups`` (and only then): an integer id per
      answer, shape ``(B,)``.
    * ``lengths``: ``opo`` only: each answer's length, shape ``(B,)``,
      finite and >= 0. A group whose valid answers have total length 0 has
      no baseline, nor one holding a traced length out of range: NaN.

    An estimator with a ``"running"`` level keeps running statistics: its
    ``init()`` gives them before any reward, ``step(state, rewards, *,
    domains=None, group_ids=None) -> (GroupAdvantages, state)`` merges the
    batch into them and then normalizes it with them (ROLL's order), and
    ``apply(rewards, *, state, domains=None, group_ids=None)`` normalizes
    with ``state`` as it is. ``domains``: with ``num_domains``, each answer's
    domain id in ``[0, num_domains)``. Without a running level, ``init`` and
    ``step`` are None.
    """

    apply: Callable[..., GroupAdvantages]
    config: GroupAdvantageConfig
    init: Callable[[], domain_stats.DomainStatistics] | None = None
    step: Callable[..., tuple[GroupAdvantages, domain_stats.DomainStatistics]] | None = None


def group_advantages(
    estimator: str | None = None,
    *,
    convention: str = "exact",
    group_size: int | None = None,
    num_groups: int | None = None,
    groups_span_devices: bool | None = None,
    reward_weights=None,
    standardize_batch: bool = False,
    f_norm: float | None = None,
    axis_name=None,
    mean: str | None = None,
    std: str | None = None,
    leave_one_out: bool | None = None,
    ddof: int | None = None,
    epsilon: float | None = None,
    epsilon_at: str | None = None,
    num_domains: int | None = None,
    std_floor: float | None = None,
) -> GroupAdvantageEstimator:
    r"""An estimator of group-relative advantages: ``apply(rewards, ...)`` gives them.

    RL for language models samples :math:`G` answers per prompt and scores each
    answer against its group (the formulas are in
    :mod:`~rewardnorm_jax._src.llm.advantages`). ``apply(rewards, *,
    group_ids=None, lengths=None)`` (:class:`GroupAdvantageEstimator`) returns
    a :class:`GroupAdvantages`: the advantages, and ``zero_variance``, True
    for every answer of a group whose valid rewards are all equal, groups of
    one and groups without a valid reward included (DAPO's dynamic sampling
    drops those groups; a loss may leave them out of its denominator).

    A convention is one trainer's formula in exact arithmetic:

    ============  ====  =======  =======================  ===========================
    convention    ddof  epsilon  a group of one           a NaN reward
    ============  ====  =======  =======================  ===========================
    ``exact``     1     none     0                        left out; its advantage NaN
    ``trl``       1     1e-4     0                        left out; its advantage 0
    ``verl``      1     1e-6     mean 0, std 1: keeps r   its group's advantages NaN
    ``tunix``     1     1e-6     refused (NaN if ragged)  its group's advantages NaN
    ``openrlhf``  1     1e-9     refused (NaN if ragged)  its group's advantages NaN
    ``areal``     1     1e-5     loo mean 0, ddof-1 std   every advantage of a
                                 1 (AReaL's cases)        statistic holding it NaN
    ``roll``      1     1e-6     ddof-1 std NaN: NaN      every advantage of a
                                 standardized, else 0     statistic holding it NaN
    ``skyrl``     1     1e-6     mean 0: keeps r          its group's advantages NaN
    ``nemo_rl``   1     1e-6     0                        its group's advantages NaN
    ============  ====  =======  =======================  ===========================

    The epsilon is added to the standard deviation (``epsilon_at="std"``; under
    the square root with ``"variance"``). A ``"batch"`` or ``"group"``
    standard deviation is taken about its own set's mean (``torch.std``),
    except under ``areal``, whose standard deviation is about the mean the
    advantages subtract (AReaL's ``_compute_std(x, mask, mean)``): for
    ``mean="group", std="batch"`` the batch's spread of the group-centred
    rewards, for ``mean="none"`` the root mean square of the rewards.

    **Levels** (``estimator="normalized"``, the default when ``mean`` or
    ``std`` is given): :math:`A = (r - \mu) / (\sigma + \epsilon)`, or
    :math:`r - \mu` with ``std="none"``, the mean :math:`\mu` of the
    ``"group"`` (optionally leaving the answer out, :math:`(S - r) / (n -
    1)`), the ``"batch"`` (likewise), ``"running"`` statistics or ``"none"``
    (0), the standard deviation :math:`\sigma` of the ``"group"``, the
    ``"batch"``, ``"running"`` statistics or ``"none"``. ``grpo`` is
    ``mean="group", std="group"``; ``dr_grpo`` and ``reinforce_pp_baseline``
    ``std="none"``; ``batch_std`` ``std="batch"``; ``rloo`` and
    ``rloo_vectorized`` ``leave_one_out=True, std="none"``: the same code,
    the same numbers. AReaL's ``NormConfig(mean_level, mean_leave1out,
    std_level, std_unbiased)`` is ``convention="areal"`` with ``mean``,
    ``leave_one_out``, ``std`` and ``ddof=int(std_unbiased)``; ROLL's
    ``reward_norm(norm_mean_type, norm_std_type)`` is ``convention="roll"``
    with ``mean`` and ``std`` (ROLL calls it on each domain's part of the
    batch: call ``apply`` on each domain's rewards for its batch levels).
    A group is settled (constant: exactly 0; of one: the convention's rule)
    where the mean is the group's; with another mean, its answers keep
    :math:`(r - \mu) / (\sigma + \epsilon)`.

    **Running statistics** (:mod:`~rewardnorm_jax._src.llm.domains`): with a
    ``"running"`` level the estimator keeps the running mean and ddof
    standard deviation of every reward seen, one set per domain with
    ``num_domains`` (ROLL's ``RunningMoments`` per domain) or one shared
    set; ``step`` merges the batch's finite rewards first, then normalizes
    (ROLL's order). ROLL's ``reward_norm`` reads ``running_ctrl["domain"]``, a
    key its pipeline never sets (it keys them by domain name: a KeyError as
    written); the library does what its pipeline and docs intend, one set
    per domain. Under ``"spreads"`` a NaN reward makes its domain's answers
    NaN in that batch and is left out of the statistics (in ROLL it makes the
    domain's statistics NaN for good).

    **MaxRL** (``maxrl``, SkyRL's ``compute_maxrl_advantage``):
    :math:`A = (r - \bar r) / (\bar r + \epsilon)`, meant for binary
    rewards (a mean near 0 or below it makes it meaningless): [1, 0, 0, 0]
    gives [3, -1, -1, -1]. Under ``exact`` (no epsilon) a group of mean 0 whose
    rewards are not constant ([1, -1]) gives NaN; a constant group 0; a group
    of one 0 (``skyrl``: its reward, as SkyRL's mean of a group of one is 0).
    **NeMo RL's leave-one-out std** (``rloo_std``, ``use_leave_one_out_baseline``
    with ``normalize_rewards``): :math:`A_i = (r_i - \bar r_{-i}) /
    (\sigma_{-i} + \epsilon)` with :math:`\sigma_{-i}` the others' ddof-1
    standard deviation, or :math:`r_i - \bar r_{-i}` where it is at most
    ``std_floor`` (0: NeMo's zero-std skip, NVIDIA-NeMo/RL#1519; 1e-3 the floor
    proposed in NVIDIA-NeMo/RL#4161 against float32 residues, which the
    library does not leave): [1, 0, 0, 0] gives [1, -0.5774, -0.5774,
    -0.5774]; a group of one or two keeps :math:`r_i - \bar r_{-i}` (0 for
    one).

    Where the mean is the group's, a constant group gives exactly 0 in every
    convention, in float32 as in float64: the library
    detects it, where the trainers' float32 code leaves residues up to 0.99.
    Every standardized value (``grpo``, ``batch_std``, ``gdpo``) is within
    about 1e-6 (relative to ``|A| + 1``) of the convention evaluated in float64
    on the same inputs, near-constant groups included (the statistics are sums
    of deviations from a value of the group,
    :mod:`~rewardnorm_jax._src.llm.moments`); the unstandardized ones
    (``dr_grpo``, ``rloo``, ``rloo_vectorized``, ``opo``,
    ``reinforce_pp_baseline``, ``gpg``) within about 1e-6 of their group's
    spread. All of this holds for any finite rewards, near the dtype's limits
    included (rewards of 3e38 in float32, spreads of 1e-30): each group's
    statistics are taken at a power-of-two scale of its values, which keeps
    every digit. An advantage beyond the dtype's range is NaN, never inf.
    Non-finite rewards count as NaN. Everything is computed in the rewards'
    floating dtype as JAX holds them (float64 only under ``jax_enable_x64``).
    Integer and boolean rewards (0/1 correctness) are taken as floats;
    advantages are floating, at least float32.

    The trainers' estimators: TRL has ``grpo`` (``scale_rewards="group"``),
    ``dr_grpo`` (``"none"``), ``batch_std`` (``"batch"``), ``rloo`` and ``gdpo``
    (``multi_objective_aggregation="normalize_then_sum"``); verl ``grpo``,
    ``dr_grpo`` (``norm_adv_by_std_in_grpo=False``), ``rloo``,
    ``rloo_vectorized``, ``opo``, ``reinforce_pp_baseline`` and ``gdpo``
    (both before their token-level whitening) and ``gpg``; Tunix ``grpo``,
    ``dr_grpo`` (its ``drgrpo``) and ``rloo``; OpenRLHF ``grpo`` (its
    ``group_norm``), ``dr_grpo``, ``rloo`` and ``reinforce_pp_baseline`` (its
    ``reinforce_baseline``, before whitening).
    ``exact`` has them all. verl has two RLOOs that differ for a group of one
    answer: ``rloo`` (``compute_rloo_outcome_advantage``, a loop) keeps its
    reward, ``rloo_vectorized`` (``compute_rloo_vectorized_outcome_advantage``)
    gives it 0; under ``exact`` both give 0 and are the same estimator. ``gpg``
    (``compute_gpg_outcome_advantage``) takes :math:`\alpha` from the whole
    batch, across devices with an ``axis_name`` (verl overwrites its ``alpha``
    argument so): under ``verl`` :math:`B` counts every answer and a NaN counts
    as nonzero (``torch.count_nonzero``), and a group of one keeps :math:`\alpha
    r / f_\text{norm}`; under ``exact`` both counts are of the valid answers,
    and a group of one gives 0. In ``gdpo``, a NaN from one reward function
    makes the answer's total NaN under ``exact`` (its advantage NaN), and counts
    as 0 under ``trl`` unless every function is NaN.

    Args:
      estimator: ``"grpo"``, ``"dr_grpo"``, ``"batch_std"``, ``"rloo"``,
        ``"rloo_vectorized"``, ``"opo"``, ``"reinforce_pp_baseline"``,
        ``"gdpo"``, ``"gpg"``, ``"maxrl"``, ``"rloo_std"`` or
        ``"normalized"`` (the levels below); default ``"normalized"`` where
        ``mean`` or ``std`` is given, else ``"grpo"``.
      convention: ``"exact"`` (the library's), or one trainer's:
        ``"trl"``, ``"verl"``, ``"tunix"``, ``"openrlhf"``, ``"areal"``,
        ``"roll"``, ``"skyrl"``, ``"nemo_rl"``.
      group_size: contiguous groups (Tunix, OpenRLHF): answers
        ``[k G, (k + 1) G)`` answer prompt ``k``. With an ``axis_name``, each
        device's batch must hold whole groups (an error otherwise).
      num_groups: ragged groups (verl's ``uid``, dynamic sampling): ``apply``
        takes ``group_ids`` in ``[0, num_groups)``, in any order, some unused.
        Memory and work grow with ``num_groups`` whatever the batch (about
        ten per-group totals of the rewards' dtype, each 8.6 GB in float32
        for ``2**31`` groups): number the groups densely (ids
        hashed from uids through ``np.unique(uids, return_inverse=True)``),
        so that ``num_groups`` is at most the batch's size.
      groups_span_devices: with ``num_groups`` and an ``axis_name`` (and only
        then, where it is required): True if an id names one group on every
        device (its statistics are summed across the axis), False if each
        device numbers its own groups.
      reward_weights: ``gdpo`` only: a weight per reward function (default 1), a
        sequence of numbers or a concrete 1-D array.
      standardize_batch: standardize the advantages over the batch afterwards,
        :math:`(A - \bar A) / (\sigma_A + \epsilon)` over the valid answers
        (TRL RLOO's ``normalize_advantages``); ``exact`` and ``trl`` only.
      f_norm: ``gpg`` only: the divisor :math:`f_\text{norm}`, finite and > 0
        (default 1, verl's).
      axis_name: the axis of the devices that hold the batch (inside
        ``shard_map``, ``pmap`` or ``vmap``): batch statistics (``batch_std``,
        ``gdpo``, ``gpg``'s :math:`\alpha`), and groups that span devices, are
        computed over all of them; running statistics merge across it.
      mean: ``"normalized"`` only: ``"group"``, ``"batch"``, ``"running"``
        or ``"none"``.
      std: ``"normalized"`` only: ``"group"``, ``"batch"``, ``"running"``
        or ``"none"``.
      leave_one_out: ``"normalized"`` only: leave each answer out of its
        group's or batch's mean (AReaL's ``mean_leave1out``).
      ddof: 0 or 1, every standard deviation's delta degrees of freedom
        (AReaL's ``std_unbiased``); default the convention's.
      epsilon: finite and >= 0; default the convention's.
      epsilon_at: ``"std"`` (added to the standard deviation) or
        ``"variance"`` (under the square root); default the convention's.
      num_domains: with a ``"running"`` level: one set of running statistics
        per domain, ids in ``[0, num_domains)`` passed as ``domains``; None:
        one shared set.
      std_floor: ``rloo_std`` only: the others' standard deviation at or
        below which the advantage is left undivided (default 0).

    Returns:
      A :class:`GroupAdvantageEstimator`, whose ``apply`` works under ``jit``,
      ``vmap`` and ``shard_map``. Its advantages are targets, as in the
      trainers, which compute them without gradients: no gradient flows back
      into the rewards.

    Raises:
      ValueError: naming an option, its value and what is valid; ``apply``
        raises for inputs of the wrong shape, a batch that is not a multiple
        of ``group_size``, and concrete ids outside ``[0, num_groups)`` (traced
        ids out of range are a ``checkify`` error, and their answers get NaN).

    Examples:
      Contiguous groups of 4 answers, 0/1 correctness rewards:

      >>> import numpy as np
      >>> import rewardnorm_jax as rn
      >>> grpo = rn.group_advantages("grpo", group_size=4)
      >>> out = grpo.apply(np.array([1, 0, 0, 1, 1, 1, 1, 1]))
      >>> [round(a, 4) for a in out.advantages.tolist()]
      [0.866, -0.866, -0.866, 0.866, 0.0, 0.0, 0.0, 0.0]
      >>> out.zero_variance.tolist()
      [False, False, False, False, True, True, True, True]

      Ragged group ids, in verl's convention:

      >>> rloo = rn.group_advantages("rloo", convention="verl", num_groups=3)
      >>> out = rloo.apply(np.array([1.0, 2.0, 0.5, 3.0]), group_ids=np.array([2, 0, 2, 0]))
      >>> out.advantages.tolist()
      [0.5, -1.0, -0.5, 1.0]

    References:
      Shao et al, `DeepSeekMath (GRPO) <https://arxiv.org/abs/2402.03300>`_, 2024;
      Liu et al, `Understanding R1-Zero-Like Training (Dr. GRPO)
      <https://arxiv.org/abs/2503.20783>`_, 2025; Ahmadian et al, `Back to Basics
      (RLOO) <https://arxiv.org/abs/2402.14740>`_, 2024; Hao et al, On-Policy RL
      with Optimal Reward Baseline (OPO), 2025; Hu, `REINFORCE++
      <https://arxiv.org/abs/2501.03262>`_, 2025; GDPO as TRL
      (``trl/trainer/grpo_trainer.py``) and verl (``verl/trainer/ppo/core_algos.py``)
      implement it.
    """
    config = GroupAdvantageConfig.checked(
        estimator,
        convention,
        group_size,
        num_groups,
        groups_span_devices,
        reward_weights,
        standardize_batch,
        f_norm,
        axis_name,
        mean,
        std,
        leave_one_out,
        ddof,
        epsilon,
        epsilon_at,
        num_domains,
        std_floor,
    )
    if config.running:
        return _running_estimator(config)

    def checked_apply(rewards, *, group_ids=None, lengths=None) -> GroupAdvantages:
        rs.participants(config.axis_name)  # an unbound axis_name is named before any collective
        return apply(config, *_check_inputs(config, rewards, group_ids, lengths))

    return GroupAdvantageEstimator(apply=checked_apply, config=config)


class Running(NamedTuple):
    """Each answer's running statistics: mean (two words), standard deviation, NaN flag."""

    mean_high: jax.Array
    mean_low: jax.Array
    std: jax.Array
    incomplete: jax.Array | None  # its domain's batch holds an invalid reward ("spreads")


def _running_estimator(config: GroupAdvantageConfig) -> GroupAdvantageEstimator:
    """The estimator of running levels: ``init``, ``step`` and ``apply`` with a state."""

    def init() -> domain_stats.DomainStatistics:
        return domain_stats.init(config.num_domains)

    def checked(state, rewards, group_ids, domains):
        rs.participants(config.axis_name)
        checks.check_state(state, checks.expected_layout(init), (), config)
        rewards, group_ids, _ = _check_inputs(config, rewards, group_ids, None)
        return rewards, group_ids, _check_domains(config, rewards.shape[0], domains)

    def checked_apply(rewards, *, state, domains=None, group_ids=None) -> GroupAdvantages:
        rewards, group_ids, domains = checked(state, rewards, group_ids, domains)
        return _apply_running(config, state, rewards, group_ids, domains)

    def step(state, rewards, *, domains=None, group_ids=None):
        rewards, group_ids, domains = checked(state, rewards, group_ids, domains)
        state = domain_stats.update(state, rewards, domains, config.axis_name)
        return _apply_running(config, state, rewards, group_ids, domains), state

    return GroupAdvantageEstimator(apply=checked_apply, config=config, init=init, step=step)


def _apply_running(config, state, rewards, group_ids, domains) -> GroupAdvantages:
    first_std = CONVENTIONS[config.convention].first_running_std
    mean_high, mean_low, spread = domain_stats.read(
        state, domains, config.ddof, first_std, rewards.dtype
    )
    incomplete = None
    if CONVENTIONS[config.convention].invalid == "spreads":  # a NaN makes its domain's NaN
        invalid = (~jnp.isfinite(rewards)).astype(rewards.dtype)
        if domains is None:
            incomplete = layouts.Whole(config.axis_name).sums(invalid)[0][0] > 0
        else:
            counts = jax.ops.segment_sum(invalid, domains, cast(int, config.num_domains))
            if config.axis_name is not None:
                counts = jax.lax.psum(counts, config.axis_name)
            incomplete = rs.per_key(counts, domains) > 0
    shape = rewards.shape
    if incomplete is not None:
        incomplete = jnp.broadcast_to(incomplete, shape)
    running = Running(
        jnp.broadcast_to(mean_high, shape),
        jnp.broadcast_to(mean_low, shape),
        jnp.broadcast_to(spread, shape),
        incomplete,
    )
    return apply(config, rewards, group_ids, None, running)


def apply(
    config: GroupAdvantageConfig, rewards, group_ids, lengths, running: Running | None = None
) -> GroupAdvantages:
    """The advantages of checked inputs: floating ``rewards``, int32 ``group_ids`` or None."""
    rules = CONVENTIONS[config.convention]
    groups = _layout(config, group_ids)
    if config.estimator == "gdpo":
        return _gdpo(config, rules, groups, rewards)
    values = groups.grouped(rewards)
    valid = jnp.isfinite(values)
    weights = None
    if lengths is not None:  # the weighted mean is the same for lengths scaled alike
        weights = groups.grouped(lengths)
        weights = weights * groups.rows(power_of_two(groups.largest(weights, valid)))
    stats = moments(groups, values, valid, weights, scaled=True)
    advantages = _estimate(config, config.estimator, rules, groups, stats, values, running)
    zero_variance = groups.flat(_zero(groups, stats, valid))
    if config.standardize_batch:  # groups of one are left out, as TRL's NaN baselines are
        single = groups.rows(stats.valid_count) == 1
        advantages = groups.flat(jnp.where(valid & ~single, advantages, jnp.nan))
        standardized = _over_batch(config, rules, advantages)
        single = groups.flat(jnp.broadcast_to(single, valid.shape) & valid)
        return GroupAdvantages(jnp.where(single, 0, standardized), zero_variance)
    advantages = _invalid(rules, groups, stats, valid, advantages)
    return GroupAdvantages(groups.flat(advantages), zero_variance)


def _gdpo(config, rules: Convention, groups, rewards) -> GroupAdvantages:
    """Each reward function standardized in its group, summed with weights, then over the batch."""
    values = groups.grouped(rewards)
    valid = jnp.isfinite(values)
    stats = moments(groups, values, valid, scaled=True)
    scores = _estimate(config, "grpo", rules, groups, stats, values)
    scores = _invalid(rules, groups, stats, valid, scores)
    weights = config.reward_weights or (1.0,) * rewards.shape[1]
    # verl returns the sum itself; the others standardize it over the batch next, which is
    # scale invariant: there the weights come scaled by the power of two that brings the
    # largest into [1, 2) (exactly), so that their sum does not overflow.
    unit = 1.0 if config.convention == "verl" else _unit(weights)
    total = scores @ jnp.asarray([weight * unit for weight in weights], rewards.dtype)
    if rules.invalid == "zeroed":  # an answer is left out where no reward function scored it
        total = jnp.where(valid.any(axis=-1), total, jnp.nan)
    total = groups.flat(total)
    zero_variance = groups.flat(_zero(groups, stats, valid).all(axis=-1))
    if config.convention == "verl":  # the batch's whitening comes after, over tokens
        return GroupAdvantages(total, zero_variance)
    return GroupAdvantages(_over_batch(config, rules, total, unit), zero_variance)


def _unit(weights: tuple[float, ...]) -> float:
    """The power of two that brings the largest ``|weight|`` into [1, 2) (1 if all are 0)."""
    largest = max(abs(weight) for weight in weights)
    return math.ldexp(1.0, 1 - math.frexp(largest)[1]) if largest > 0 else 1.0


def _estimate(
    config, estimator: str, rules: Convention, groups, stats: Moments, values, running=None
):
    """``estimator``'s advantages of the grouped ``values``, before the invalid ones are settled.

    ``stats`` are scaled moments (:func:`~rewardnorm_jax._src.llm.moments.moments`):
    deviations and spreads are taken at their scale and the advantages brought
    back from it last, so that every advantage the dtype holds is computed.
    """
    levels = PRESETS.get(estimator)
    if estimator == "normalized":
        levels = (config.mean, config.leave_one_out, config.std)
    if levels is not None:
        return _normalized(
            config, Levels(*levels), estimator, rules, groups, stats, values, running
        )
    scale = groups.rows(stats.scale)
    advantages = deviations(groups, stats, values)
    own = values  # a group of one under the "own" rule: its mean taken as 0
    if estimator == "gpg":
        alpha, f_norm = _gpg_alpha(config, rules, groups, values), config.f_norm or 1.0
        # alpha first: an answer at its group's mean stays 0 whatever f_norm is.
        advantages, own = advantages * alpha / f_norm, values * alpha / f_norm
    elif estimator == "maxrl":  # both at the group's scale: their quotient is scale-free
        mean = groups.rows(stats.shift + stats.mean)
        advantages, scale = advantages / (mean + config.epsilon * scale), 1
    elif estimator == "rloo_std":
        advantages, scale = _rloo_std(config, groups, stats, values, advantages, scale), 1
    return _settle(rules, groups, stats, _overflowed(advantages / scale), _overflowed(own))


class Levels(NamedTuple):
    """Where the mean and the standard deviation of a normalized advantage are taken."""

    mean: str
    leave_one_out: bool
    std: str


def _normalized(config, levels: Levels, estimator, rules, groups, stats, values, running):
    r""":math:`(r - \mu) / (\sigma + \epsilon)` with the mean and the std of ``levels``.

    The numerator and the spread are each taken at a power-of-two scale of
    their own (the group's, the batch's, 1 for running statistics), and their
    quotient brought back by the ratio of the scales, which is exact.
    """
    count = groups.rows(stats.valid_count)
    batch = None
    if "batch" in levels[::2]:
        whole = layouts.Whole(config.axis_name)
        batch = moments(whole, groups.flat(values), groups.flat(jnp.isfinite(values)), scaled=True)
    numerator, numerator_scale = _centred(
        config, levels, rules, groups, stats, batch, values, running
    )
    own = values  # verl's group of one: its mean taken as 0 and its std as 1
    if levels.std == "none":
        advantages = numerator / numerator_scale
    else:
        spread, spread_scale = _spread(
            config, levels, rules, groups, stats, batch, values, numerator, numerator_scale, running
        )
        advantages = numerator * (spread_scale / numerator_scale) / spread
        own = values / (1 + config.epsilon)
    if estimator == "rloo_vectorized":  # its leave-one-out sum is 0 for a group of one
        own = jnp.zeros_like(values)
    advantages = _overflowed(advantages)
    if batch is not None and levels.mean == "batch":  # a constant batch: numerators exactly 0
        constant = batch.constant[0] & (batch.valid_count[0] > 1)
        advantages = jnp.where(constant, 0, advantages)
    if levels.mean != "group":  # no group is settled: its answers keep their numerators
        return _spread_invalid(config, rules, groups, batch, running, advantages)
    if rules.singleton in ("unit", "formula"):  # the formula has settled groups of one
        constant = groups.rows(stats.constant) & (count > 1)
        advantages = jnp.where(constant, 0, advantages)
    else:
        advantages = _settle(rules, groups, stats, advantages, _overflowed(own))
    return _spread_invalid(config, rules, groups, batch, running, advantages)


def _centred(config, levels: Levels, rules, groups, stats, batch, values, running):
    """Each answer minus the mean of its level, and the scale it is taken at."""
    scale = groups.rows(stats.scale)
    if levels.mean == "none":
        return values * scale, scale
    if levels.mean == "running":
        centred = (values - groups.grouped(running.mean_high)) - groups.grouped(running.mean_low)
        return centred, jnp.ones_like(scale)
    if levels.mean == "group":
        layout, moment, count = groups, stats, groups.rows(stats.valid_count)
        centred = deviations(groups, stats, values)
    else:
        layout, moment = layouts.Whole(config.axis_name), batch
        count = layout.rows(moment.valid_count)
        centred = groups.grouped(deviations(layout, moment, groups.flat(values)))
        scale = layout.rows(moment.scale)
    if levels.leave_one_out:  # r - (S - r) / (n - 1) = n / (n - 1) (r - mean)
        centred = centred * (count / (count - 1))
        if rules.singleton == "unit":  # AReaL: a lone answer's leave-one-out mean is 0
            centred = jnp.where(count == 1, values * scale, centred)
    return centred, scale


def _spread(
    config, levels, rules, groups, stats, batch, values, numerator, numerator_scale, running
):
    """The standard deviation of the std's level with the epsilon, and its scale."""
    if levels.std == "running":
        return _with_epsilon(config, groups.grouped(running.std) ** 2, 1), 1
    valid = jnp.isfinite(values)
    if levels.std == "group":
        layout, moment, scale = groups, stats, groups.rows(stats.scale)
    else:
        layout, moment = layouts.Whole(config.axis_name), batch
        scale = layout.rows(moment.scale)
    if rules.centring == "own":
        variance = layout.rows(moment_variance(moment, config.ddof))
    else:  # about the numerator's mean: the root mean square of the numerators
        at_scale = jnp.where(valid, numerator * (scale / numerator_scale), 0)
        if levels.std == "group":
            (squares,) = groups.sums(at_scale * at_scale)
        else:
            (squares,) = layout.sums(groups.flat(at_scale * at_scale))
        weight = moment.valid_count - config.ddof
        variance = layout.rows(
            jnp.where(weight > 0, squares / jnp.where(weight > 0, weight, 1), jnp.nan)
        )
    if rules.singleton == "unit" and config.ddof == 1:  # AReaL: one answer's std is 1
        variance = jnp.where(layout.rows(moment.valid_count) == 1, scale * scale, variance)
    return _with_epsilon(config, variance, scale), scale


def _with_epsilon(config, variance, scale):
    """The spread: the epsilon added to the std, or to the variance under its square root."""
    if config.epsilon_at == "variance":
        return jnp.sqrt(variance + config.epsilon * scale * scale)
    return jnp.sqrt(variance) + config.epsilon * scale


def _spread_invalid(config, rules, groups, batch, running, advantages):
    """Under ``"spreads"``: NaN for every answer of a batch or domain statistic holding a NaN."""
    if rules.invalid != "spreads":
        return advantages
    if batch is not None:
        flat = groups.flat(advantages)
        (answers,) = layouts.Whole(config.axis_name).sums(jnp.ones_like(flat))
        advantages = jnp.where(batch.valid_count[0] < answers[0], jnp.nan, advantages)
    if running is not None and running.incomplete is not None:
        advantages = jnp.where(groups.grouped(running.incomplete), jnp.nan, advantages)
    return advantages


def _rloo_std(config, groups, stats, values, advantages, scale):
    r"""NeMo RL's leave-one-out advantage over the others' standard deviation.

    :math:`A_i = (r_i - \bar r_{-i}) / (\sigma_{-i} + \epsilon)` where the
    others' (ddof-1) standard deviation :math:`\sigma_{-i}` is above
    ``std_floor``, else :math:`r_i - \bar r_{-i}` (NeMo's zero-std skip). The
    others are constant (:math:`\sigma_{-i} = 0` exactly) when the group is, or
    when :math:`r_i` is its one value apart from the others'.
    """
    valid = jnp.isfinite(values)
    count = groups.rows(stats.valid_count)
    if isinstance(groups, layouts.Contiguous):
        centred, others = _others_deviations(groups, stats, values, valid, count)
    else:  # S - n / (n - 1) (r_i - mean)^2: cancels where r_i is far from near-equal others
        centred = advantages * (count / (count - 1))  # r_i minus the others' mean, at the scale
        others = jnp.maximum(groups.rows(stats.squares) - advantages * centred, 0)
    largest = groups.largest(values, valid)
    smallest = -groups.largest(-values, valid)
    at_max = valid & (values == groups.rows(largest))
    at_min = valid & (values == groups.rows(smallest))
    maxima, minima = groups.sums(at_max.astype(values.dtype), at_min.astype(values.dtype))
    maxima, minima = groups.rows(maxima), groups.rows(minima)
    alone = (at_max & (maxima == 1) & (minima == count - 1)) | (
        at_min & (minima == 1) & (maxima == count - 1)
    )
    others_std = jnp.sqrt(others / (count - 2))
    constant = groups.rows(stats.constant) | alone | (count <= 2)
    divided = ~constant & (others_std > config.std_floor * scale)
    spread = jnp.where(divided, others_std + config.epsilon * scale, scale)
    return centred / spread


def _others_deviations(groups, stats, values, valid, count):
    r"""Each answer's :math:`r_i - \bar r_{-i}` and its others' sum of squared deviations.

    Both at the group's scale, taken directly over the group's :math:`G \times G`
    block with the answer itself masked out (as NeMo RL's leave-one-out mask does),
    in two passes: :math:`\bar r_{-i} = \sum_{j \ne i} r_j / (n - 1)`, then
    :math:`\sum_{j \ne i} (r_j - \bar r_{-i})^2`. No large nearly equal totals
    are subtracted, so an answer far from its near-equal others keeps their spread
    (:math:`[1000, 0, 0, 10^{-3}]`: :math:`\sigma_{-1} = 5.77 \times 10^{-4}`).
    """
    size = groups.size
    at_scale = jnp.where(valid, values * groups.rows(stats.scale), 0)  # exact: a power of two
    others_of = ~jnp.eye(size, dtype=bool).reshape(1, size, size, *(1,) * (values.ndim - 2))
    others_of = others_of & valid[:, None, :]  # [p, i, j]: whether j is one of i's others
    block = jnp.where(others_of, at_scale[:, None, :], 0)
    mean = jnp.sum(block, axis=2) / (count - 1)
    spread = jnp.where(others_of, block - mean[:, :, None], 0)
    return at_scale - mean, jnp.sum(spread * spread, axis=2)


def _overflowed(advantages: jax.Array) -> jax.Array:
    """NaN where an advantage is beyond the dtype's range (its inputs are finite)."""
    return jnp.where(jnp.isinf(advantages), jnp.nan, advantages)


def _gpg_alpha(config, rules: Convention, groups, values) -> jax.Array:
    r"""GPG's :math:`\alpha`, the same for every answer of the batch.

    :math:`\alpha = B / \max(\#\{r \ne 0\}, 1)`: the batch is every device's answers;
    under ``"exact"`` its valid ones (an invalid reward is left out of both counts),
    under verl's every answer (a NaN counts as nonzero, as ``torch.count_nonzero`` has
    it), and the quotient is torch's ``int / tensor``: ``m.reciprocal() * B`` in
    float32, rounded twice (verl/trainer/ppo/core_algos.py
    ``compute_gpg_outcome_advantage``, volcengine/verl): B = 14 and m = 6 give
    2.3333334922790527 where one division gives 2.3333332538604736.
    """
    whole = layouts.Whole(config.axis_name)
    rewards = groups.flat(values)
    counted = jnp.isfinite(rewards) if rules.invalid == "dropped" else jnp.ones(rewards.shape, bool)
    answers, nonzero = whole.sums(
        counted.astype(rewards.dtype), (counted & (rewards != 0)).astype(rewards.dtype)
    )
    if config.convention == "verl":  # torch's int / tensor: the tensor's float32 reciprocal, times
        answers, nonzero = answers.astype(jnp.float32), nonzero.astype(jnp.float32)
        return whole.rows(answers * (1 / jnp.maximum(nonzero, 1))).astype(rewards.dtype)
    return whole.rows(answers / jnp.maximum(nonzero, 1)).astype(rewards.dtype)


def _over_batch(config, rules: Convention, values: jax.Array, unit: float = 1.0) -> jax.Array:
    """``values`` standardized over the batch's finite ones; the others as the convention has.

    ``unit``: ``values`` are in units of ``unit`` times the advantages' (a power of two), so
    the epsilon is too.
    """
    whole = layouts.Whole(config.axis_name)
    valid = jnp.isfinite(values)
    batch = moments(whole, values, valid, scaled=True)
    spread = _with_epsilon(
        config, whole.rows(moment_variance(batch, config.ddof)), whole.rows(batch.scale) * unit
    )
    standardized = jnp.where(
        whole.rows(batch.constant), 0, deviations(whole, batch, values) / spread
    )
    return _invalid(rules, whole, batch, valid, standardized)


def _settle(rules: Convention, groups, stats: Moments, advantages, own):
    """Constant groups exactly 0; groups of one as the convention has them (``own``: verl's)."""
    count = groups.rows(stats.valid_count)
    constant = groups.rows(stats.constant)
    advantages = jnp.where(constant & (count > 1), 0, advantages)
    if rules.singleton == "zero":
        return jnp.where(count == 1, 0, advantages)
    if rules.singleton == "own":
        return jnp.where(count == 1, own, advantages)
    return jnp.where(count == 1, jnp.nan, advantages)  # "refused"


def _invalid(rules: Convention, groups, stats: Moments, valid, advantages) -> jax.Array:
    """The advantages of invalid rewards (and of their groups) as the convention has them."""
    if rules.invalid == "dropped":
        return jnp.where(valid, advantages, jnp.nan)
    if rules.invalid == "zeroed":
        return jnp.where(valid, advantages, 0)
    incomplete = stats.valid_count < groups.answers(advantages)  # "spreads"
    return jnp.where(groups.rows(incomplete), jnp.nan, advantages)


def _zero(groups, stats: Moments, valid: jax.Array) -> jax.Array:
    """Each answer's flag: its group's valid rewards are all equal."""
    return jnp.broadcast_to(groups.rows(stats.constant), valid.shape)


def _layout(config: GroupAdvantageConfig, group_ids):
    if config.group_size is not None:
        return layouts.Contiguous(config.group_size)
    span = config.axis_name if config.groups_span_devices else None
    return layouts.Ragged(group_ids, cast(int, config.num_groups), span)


def _check_inputs(config: GroupAdvantageConfig, rewards, group_ids, lengths):
    """``(rewards, group_ids, lengths)`` checked: floating rewards, int32 ids, floating lengths."""
    # Advantages are targets: no gradient flows back into the rewards.
    rewards = jax.lax.stop_gradient(checks.as_floating("rewards", rewards))
    dtype = rewards.dtype
    expected = 2 if config.estimator == "gdpo" else 1
    if rewards.ndim != expected:
        what = "(B, K): a reward per answer and reward function" if expected == 2 else "(B,)"
        raise ValueError(
            f"rewards has shape {rewards.shape}; estimator={config.estimator!r} takes shape {what}."
        )
    answers = rewards.shape[0]
    if config.estimator == "gdpo":
        _check_functions(config, rewards)
    if config.f_norm is not None:
        checks.check_positive("f_norm", config.f_norm, dtype)
    if config.group_size is not None:
        _check_contiguous(config, config.group_size, answers, group_ids)
    else:
        group_ids = _check_ids(cast(int, config.num_groups), answers, group_ids)
    return rewards, group_ids, _check_lengths(config, answers, lengths, dtype)


def _check_functions(config: GroupAdvantageConfig, rewards: jax.Array) -> None:
    """``gdpo``'s reward functions: at least one, one weight each, weights that fit the dtype."""
    functions = rewards.shape[1]
    if functions == 0:
        raise ValueError(
            f"rewards has shape {rewards.shape}: estimator='gdpo' needs at least one reward "
            "function (shape (B, K), K >= 1)."
        )
    if config.reward_weights is None:
        return
    if functions != len(config.reward_weights):
        raise ValueError(
            f"rewards has {functions} reward functions (shape {rewards.shape}), but "
            f"reward_weights has {len(config.reward_weights)} weights."
        )
    for weight in config.reward_weights:
        checks.check_fits("reward_weights", weight, rewards.dtype)


def _check_contiguous(config: GroupAdvantageConfig, group_size: int, answers: int, group_ids):
    if group_ids is not None:
        raise ValueError(
            f"group_ids was given, but the estimator was built with group_size="
            f"{group_size} (contiguous groups); build it with num_groups to group "
            "answers by ids."
        )
    if answers % group_size:
        where = "this device's batch" if config.axis_name is not None else "the batch"
        raise ValueError(
            f"rewards has {answers} answers, not a multiple of group_size={group_size}: "
            f"{where} must hold whole groups. For groups split across devices or batches, "
            "pass group ids: group_advantages(..., num_groups=P, axis_name=..., "
            "groups_span_devices=True) and apply(rewards, group_ids=ids)."
        )


def _check_ids(num_groups: int, answers: int, group_ids):
    if group_ids is None:
        raise ValueError(
            f"group_ids is missing: the estimator was built with num_groups={num_groups} "
            "(groups named by ids); pass apply(rewards, group_ids=ids), one id per answer."
        )
    return checks.check_task(
        group_ids,
        (answers,),
        num_groups,
        "answer",
        name="group_ids",
        bound="num_groups",
        plural="group ids",
    )


def _check_domains(config: GroupAdvantageConfig, answers: int, domains):
    if config.num_domains is None:
        if domains is not None:
            raise ValueError(
                "domains was given, but the estimator keeps one set of running statistics "
                "(num_domains=None); build it with num_domains to keep one per domain."
            )
        return None
    if domains is None:
        raise ValueError(
            f"domains is missing: the estimator keeps running statistics per domain "
            f"(num_domains={config.num_domains}); pass domains=ids, one per answer."
        )
    return checks.check_task(
        domains,
        (answers,),
        config.num_domains,
        "answer",
        name="domains",
        bound="num_domains",
        plural="domain ids",
    )


def _check_lengths(config: GroupAdvantageConfig, answers: int, lengths, dtype):
    if config.estimator != "opo":
        if lengths is not None:
            raise ValueError(
                f"lengths was given, but estimator={config.estimator!r} does not weight by "
                "length (estimator='opo' does)."
            )
        return None
    if lengths is None:
        raise ValueError("lengths is missing: estimator='opo' weights each answer by its length.")
    checks.check_reward("lengths", lengths)
    if np.shape(lengths) != (answers,):
        raise ValueError(
            f"lengths has shape {np.shape(lengths)}; expected ({answers},), one per answer."
        )
    # A traced length out of range makes its group's baseline NaN, not a wrong number.
    return checks.as_lengths("lengths", lengths, dtype)


def _saved_levels(metadata: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A ``group_advantages`` config's levels and arithmetic, as its estimator's preset sets them.

    Configs saved before ``mean``, ``std``, ``leave_one_out``, ``ddof``,
    ``epsilon``, ``epsilon_at``, ``num_domains`` and ``std_floor`` were options
    computed what the saved estimator's preset and convention now set.
    """
    estimator = metadata.get(prefix + "estimator", "")
    rules = CONVENTIONS.get(metadata.get(prefix + "convention", "exact"))
    if rules is None:  # an unknown convention: the comparison names it
        return {}
    levels: tuple[str | None, bool | None, str | None] = (None, None, None)
    mean, leave_one_out, std = PRESETS.get(estimator, levels)
    return {
        "mean": mean,
        "std": std,
        "leave_one_out": leave_one_out,
        "ddof": rules.ddof,
        "epsilon": float(rules.epsilon),
        "epsilon_at": rules.epsilon_at,
        "num_domains": None,
        "std_floor": 0.0 if estimator == "rloo_std" else None,
    }


checkpoint_migration.ADDED_OPTIONS["group_advantages"] = _saved_levels
