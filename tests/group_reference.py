"""A plain float64 NumPy reference of group-relative advantage estimators.

Transcribed from the trainers' own code (loops over groups, explicit branches),
independent of the library. Snapshots read:

- TRL      huggingface/trl     f2cd57710ae345ea6428ae95363267fcf38a3dc8
           trl/trainer/grpo_trainer.py, trl/trainer/rloo_trainer.py, trl/trainer/utils.py (nanstd)
- verl     verl-project/verl   1dda039b9c6311889a9c9a26040677e1254814f9
           verl/trainer/ppo/core_algos.py, verl/utils/torch_functional.py (masked_whiten)
- Tunix    google/tunix        c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3
           tunix/rl/algo_core.py, tunix/rl/reward_manager.py, tunix/rl/grpo/grpo_learner.py
- OpenRLHF OpenRLHF/OpenRLHF   3c3be6234e0cb353e76bb8019947db9dfe99fca7
           openrlhf/trainer/ppo_utils/experience_maker.py, openrlhf/cli/train_ppo_ray.py

Upstream computes in float32 (torch) or float64 (Tunix numpy); this reference is
float64 throughout. Trainers that group contiguously (TRL, Tunix, OpenRLHF) are
evaluated per group id here, which is the same thing for ``np.arange(B) // G``.
"reinforce_pp_baseline" and verl "gdpo" stop before the token-level whitening.
"""

import warnings

import numpy as np

ESTIMATORS = (
    "grpo",
    "drgrpo",
    "batch_std",
    "rloo",
    "rloo_vectorized",
    "opo",
    "reinforce_pp_baseline",
    "gdpo",
    "gpg",
)
CONVENTIONS = ("trl", "verl", "tunix", "openrlhf")


def _groups(group_ids, num_groups):
    """Yield the member indices of each used group id, in id order."""
    for g in range(num_groups):
        idx = np.flatnonzero(group_ids == g)
        if idx.size:
            yield idx


def _nanmean(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x) if np.size(x) else np.nan


def _trl_nanstd(x):
    """``trl.trainer.utils.nanstd``: NaN-ignoring std with Bessel; NaN if fewer than 2 non-NaN."""
    count = np.sum(~np.isnan(x))
    if count < 2:
        return np.nan
    mean = _nanmean(x)
    return np.sqrt(_nanmean((x - mean) ** 2) * count / (count - 1))


def _trl_combine(rewards, weights):
    """TRL sum_then_normalize: the weighted ``nansum`` over reward functions.

    A row where every function returned None/NaN is unscorable and set to NaN.
    """
    r2 = rewards.reshape(rewards.shape[0], -1)
    w = np.ones(r2.shape[1]) if weights is None else np.asarray(weights, np.float64)
    out = np.nansum(r2 * w[None, :], axis=1)
    out[np.isnan(r2).all(axis=1)] = np.nan
    return out


def trl(rewards, group_ids, num_groups, estimator, weights=None, normalize_advantages=False):
    """TRL's GRPOTrainer and RLOOTrainer advantages.

    ``_generate_and_score_completions`` (grpo_trainer.py) and rloo_trainer.py.
    grpo/drgrpo/batch_std = scale_rewards "group"/"none"/"batch";
    gdpo = multi_objective_aggregation="normalize_then_sum"; NaN advantages -> 0.
    """
    adv = np.full(rewards.shape[0], np.nan)
    if estimator == "gdpo":
        r2 = rewards.reshape(rewards.shape[0], -1)
        w = np.ones(r2.shape[1]) if weights is None else np.asarray(weights, np.float64)
        z = np.full(r2.shape, np.nan)
        for idx in _groups(group_ids, num_groups):
            for k in range(r2.shape[1]):
                x = r2[idx, k]
                std = _trl_nanstd(x) if idx.size > 1 else 0.0
                z[idx, k] = (x - _nanmean(x)) / (std + 1e-4)
        summed = np.nansum(z * w[None, :], axis=1)
        summed[np.isnan(r2).all(axis=1)] = np.nan
        std_b = _trl_nanstd(summed) if summed.size > 1 else 0.0
        adv = (summed - _nanmean(summed)) / (std_b + 1e-4)
        return np.nan_to_num(adv, nan=0.0)
    r = _trl_combine(rewards, weights)
    if estimator == "rloo":
        for idx in _groups(group_ids, num_groups):
            x = r[idx]
            if idx.size > 1:  # baseline over scorable siblings; one scorable -> 0/0 = NaN
                adv[idx] = x - (np.nansum(x) - x) / (np.sum(~np.isnan(x)) - 1)
            else:  # num_generations_eval == 1
                adv[idx] = 0.0
        if normalize_advantages:  # RLOOConfig.normalize_advantages, default False
            adv = (adv - _nanmean(adv)) / (_trl_nanstd(adv) + 1e-4)
        return np.nan_to_num(adv, nan=0.0)
    std_b = _trl_nanstd(r) if r.size > 1 else 0.0
    for idx in _groups(group_ids, num_groups):
        x = r[idx]
        adv[idx] = x - _nanmean(x)
        if estimator == "grpo":
            adv[idx] /= (_trl_nanstd(x) if idx.size > 1 else 0.0) + 1e-4
        elif estimator == "batch_std":
            adv[idx] /= std_b + 1e-4
    return np.nan_to_num(adv, nan=0.0)


def verl(
    rewards,
    group_ids,
    num_groups,
    estimator,
    lengths=None,
    weights=None,
    epsilon=1e-6,
    f_norm=1.0,
):
    """Verl's outcome advantages (core_algos.py).

    compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo True/False
    = grpo/drgrpo), compute_rloo_outcome_advantage, compute_rloo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage, compute_gpg_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage and compute_gdpo_outcome_advantage,
    the last two without their final ``masked_whiten``. NaN is not handled: it spreads.
    """
    if estimator == "rloo_vectorized":  # bincount over np.unique's inverse
        inv = np.unique(group_ids, return_inverse=True)[1].ravel()
        c = np.bincount(inv)[inv].astype(rewards.dtype)
        sums = np.bincount(inv, weights=rewards)[inv]
        return ((c * rewards - sums) / np.maximum(c - 1, 1)) * (c > 1)
    if estimator == "gpg":  # alpha overwritten from the whole batch; f_norm's default 1
        # bsz / m.clamp(min=1): an int over an int64 tensor, torch's float32 quotient
        nonzero = max(int(np.count_nonzero(rewards)), 1)
        alpha = np.float32(rewards.shape[0]) / np.float32(nonzero)
        adv = np.empty_like(rewards)
        for idx in _groups(group_ids, num_groups):
            x = rewards[idx]
            mean = 0.0 if idx.size == 1 else x.mean()
            adv[idx] = np.float64(alpha) * (x - mean) / f_norm
        return adv
    if estimator == "gdpo":
        r2 = rewards.reshape(rewards.shape[0], -1)
        w = np.ones(r2.shape[1]) if weights is None else np.asarray(weights, np.float64)
        return sum(w[k] * verl(r2[:, k], group_ids, num_groups, "grpo") for k in range(r2.shape[1]))
    if rewards.ndim != 1:
        raise ValueError("verl feeds a single scalar score per response")
    adv = np.empty_like(rewards)
    for idx in _groups(group_ids, num_groups):
        x, n = rewards[idx], idx.size
        if estimator == "grpo":
            mean, std = (0.0, 1.0) if n == 1 else (x.mean(), x.std(ddof=1))  # torch.std: Bessel
            adv[idx] = (x - mean) / (std + epsilon)
        elif estimator in ("drgrpo", "reinforce_pp_baseline"):
            adv[idx] = x - (0.0 if n == 1 else x.mean())
        elif estimator == "rloo":  # singleton left as r (rloo_vectorized gives 0 instead)
            adv[idx] = x if n == 1 else x * n / (n - 1) - x.mean() * n / (n - 1)
        elif estimator == "opo":
            if lengths is None:
                raise ValueError("opo needs lengths")
            ln = np.asarray(lengths, np.float64)[idx]
            adv[idx] = x - (0.0 if n == 1 else (ln * x).sum() / ln.sum())
        else:
            raise NotImplementedError(f"verl has no {estimator!r}")
    return adv


def tunix(rewards, group_ids, num_groups, estimator):
    """Tunix's estimators "grpo", "rloo", "drgrpo" (algo_core.py), fed the rewards directly.

    On the trainer's path the reward manager first sums the reward functions
    with np.nansum (reward_manager.py), so a NaN or None counts as 0, and
    GRPOConfig refuses num_generations <= 1.
    """
    if estimator not in ("grpo", "rloo", "drgrpo"):
        raise NotImplementedError(f"tunix has no {estimator!r}")
    r = rewards.reshape(rewards.shape[0], -1)[:, 0].copy()
    adv = np.empty_like(r)
    for idx in _groups(group_ids, num_groups):
        x, n = r[idx], idx.size
        if estimator == "grpo":
            with warnings.catch_warnings():  # n == 1: ddof=1 std is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                adv[idx] = (x - x.mean()) / (x.std(ddof=1) + 1e-6)
        elif estimator == "rloo":
            adv[idx] = 0.0 if n < 2 else x - (x.sum() - x) / (n - 1)
        else:
            adv[idx] = x - x.mean()
    return adv


def openrlhf(rewards, group_ids, num_groups, estimator):
    """OpenRLHF's reward shaping (experience_maker.compute_advantages_and_returns).

    group_norm / dr_grpo / rloo / reinforce_baseline (before its token whitening).
    train_ppo_ray.py asserts n_samples_per_prompt > 1 (raised here as ValueError).
    """
    names = {
        "grpo": "group_norm",
        "drgrpo": "dr_grpo",
        "rloo": "rloo",
        "reinforce_pp_baseline": "reinforce_baseline",
    }
    if estimator not in names:
        raise NotImplementedError(f"openrlhf has no {estimator!r}")
    if rewards.ndim != 1:
        raise ValueError("openrlhf feeds a single scalar reward per response")
    adv = np.empty_like(rewards)
    for idx in _groups(group_ids, num_groups):
        x, n = rewards[idx], idx.size
        if n < 2:
            raise ValueError(f"{names[estimator]} requires n_samples_per_prompt > 1")
        if estimator == "rloo":
            adv[idx] = x - (x.sum() - x) / (n - 1)
        elif estimator == "grpo":
            adv[idx] = (x - x.mean()) / (x.std(ddof=1) + 1e-9)
        else:
            adv[idx] = x - x.mean()
    return adv


def advantages(
    rewards, group_ids, num_groups, *, estimator, convention, lengths=None, weights=None
):
    """Per-response advantages (B,) for ``estimator`` under ``convention``'s trainer code."""
    rewards = np.asarray(rewards, np.float64)
    group_ids = np.asarray(group_ids).astype(np.int64)
    if estimator not in ESTIMATORS or convention not in CONVENTIONS:
        raise ValueError(f"unknown estimator/convention {estimator!r}/{convention!r}")
    if rewards.ndim == 2 and estimator != "gdpo" and convention in ("verl", "openrlhf"):
        raise ValueError(f"{convention} {estimator}: rewards must be (B,)")
    if convention == "trl":
        if estimator in ("opo", "reinforce_pp_baseline"):
            raise NotImplementedError(f"trl has no {estimator!r}")
        return trl(rewards, group_ids, num_groups, estimator, weights=weights)
    if convention == "verl":
        if estimator == "batch_std":
            raise NotImplementedError("verl has no 'batch_std'")
        return verl(rewards, group_ids, num_groups, estimator, lengths=lengths, weights=weights)
    if convention == "tunix":
        return tunix(rewards, group_ids, num_groups, estimator)
    return openrlhf(rewards, group_ids, num_groups, estimator)
