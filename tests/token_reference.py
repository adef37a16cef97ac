"""Float64 NumPy transcriptions of the trainers' token-level code: whitening, KL, overlong.

Snapshots read (as in ``tests/group_reference.py``):

- verl     verl-project/verl   1dda039b9c6311889a9c9a26040677e1254814f9
           verl/utils/torch_functional.py (masked_mean, masked_var, masked_whiten),
           verl/trainer/ppo/core_algos.py (kl_penalty, kl_penalty_forward,
           compute_reinforce_plus_plus_baseline_outcome_advantage,
           compute_gdpo_outcome_advantage),
           verl/trainer/ppo/ray_trainer.py (apply_kl_penalty),
           verl/workers/reward_manager/dapo.py (overlong reward)
- Tunix    google/tunix        c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3
           tunix/rl/algo_core.py (masked_mean, masked_var, masked_whiten),
           tunix/rl/common.py (compute_kl_divergence),
           tunix/rl/grpo/dapo_learner.py (reward_shaping)
- OpenRLHF OpenRLHF/OpenRLHF   3c3be6234e0cb353e76bb8019947db9dfe99fca7
           openrlhf/trainer/ppo_utils/experience_maker.py (advantage normalization),
           openrlhf/models/utils.py (compute_approx_kl),
           openrlhf/trainer/ppo_utils/length_penalty.py (apply_overlong_penalty)

Each function keeps its trainer's arithmetic, poisoning included (a NaN at a
masked-out position reaches the sums where the trainer multiplies by the mask).
"""

import math

import numpy as np


def verl_masked_whiten(values, mask, shift_mean=True):
    mask = mask.astype(np.float64)
    values = values.astype(np.float64)

    def masked_mean(x):
        return (np.where(mask > 0, x, 0.0) * mask).sum() / (mask.sum() + 1e-8)

    mean = masked_mean(values)
    n = mask.sum()
    if n in (0, 1):  # masked_var's two checks; a weight below 1 goes through
        raise ValueError("verl refuses a mask that sums to 0 or 1")
    var = masked_mean((values - mean) ** 2) * n / (n - 1)
    whitened = (values - mean) / np.sqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def tunix_masked_whiten(values, mask):
    mask = mask.astype(np.float64)
    values = values.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (values * mask).sum() / (mask.sum() + 1e-8)
        variance = ((values - mean) ** 2 * mask).sum() / (mask.sum() + 1e-8)
        variance = variance * (mask.sum() / (mask.sum() - 1))
        return (values - mean) / np.sqrt(variance + 1e-8)


def openrlhf_whiten(advantages, mask):
    mask = mask.astype(np.float64)
    advantages = advantages.astype(np.float64)
    with np.errstate(invalid="ignore"):
        n = mask.sum()
        mean = (advantages * mask).sum() / n
        var = ((advantages - mean) ** 2 * mask).sum() / n
        return (advantages - mean) / np.sqrt(max(var, 1e-8))


def verl_reinforce_pp_baseline(scores, group_ids, mask):
    """Sequence scores (B,), uids (B,), response mask (B, T) -> token advantages (B, T)."""
    scores = scores.astype(np.float64).copy()
    means = {}
    for g in np.unique(group_ids):
        members = scores[group_ids == g]
        means[g] = 0.0 if members.size == 1 else members.mean()
    scores = scores - np.array([means[g] for g in group_ids])
    tokens = scores[:, None] * mask
    return verl_masked_whiten(tokens, mask) * mask


def verl_gdpo(rewards, group_ids, mask, weights, epsilon=1e-6):
    """Rewards (B, K) of K functions -> token advantages (B, T): per-function GRPO, sum, whiten."""
    total = np.zeros(rewards.shape[0])
    for k, weight in enumerate(weights):
        scores = rewards[:, k].astype(np.float64)
        normalized = np.empty_like(scores)
        for g in np.unique(group_ids):
            members = group_ids == g
            r = scores[members]
            if r.size == 1:
                normalized[members] = r / (1.0 + epsilon)
            else:
                normalized[members] = (r - r.mean()) / (r.std(ddof=1) + epsilon)
        total += weight * normalized
    tokens = total[:, None] * mask
    return verl_masked_whiten(tokens, mask) * mask


def verl_kl(logprob, ref_logprob, name):
    """``kl_penalty_forward``: k1 / abs / k2 unclamped; k3 log ratio clamped at 20, value at 10."""
    logprob, ref_logprob = logprob.astype(np.float64), ref_logprob.astype(np.float64)
    if name == "k1":
        return logprob - ref_logprob
    if name == "abs":
        return np.abs(logprob - ref_logprob)
    if name == "k2":
        return 0.5 * (logprob - ref_logprob) ** 2
    kl = np.clip(ref_logprob - logprob, -20, 20)
    return np.clip(np.exp(kl) - kl - 1, -10, 10)


def openrlhf_kl(log_probs, log_probs_base, name, action_mask=None):
    log_ratio = log_probs.astype(np.float64) - log_probs_base.astype(np.float64)
    if action_mask is not None:
        log_ratio = log_ratio * action_mask
    if name == "k2":
        log_ratio = log_ratio**2 / 2.0
    elif name == "k3":
        log_ratio = np.exp(-log_ratio) - 1 + log_ratio
    return np.clip(log_ratio, -10, 10)


def tunix_kl(per_token_logps, ref_per_token_logps, name, clamp_value=None):
    logps, ref = per_token_logps.astype(np.float64), ref_per_token_logps.astype(np.float64)
    if name == "k1":
        kl = logps - ref
    elif name == "k2":
        kl = 0.5 * (logps - ref) ** 2
    else:
        diff = ref - logps
        kl = np.exp(diff) - diff - 1
    return kl if clamp_value is None else np.clip(kl, -clamp_value, clamp_value)


def verl_kl_in_reward(token_level_scores, logprob, ref_logprob, mask, beta, name):
    return token_level_scores - beta * verl_kl(logprob, ref_logprob, name) * mask


def dapo_overlong(length, max_length, buffer_length, factor):
    """The DAPO reward manager of verl, and Tunix's ``reward_shaping``: no cap."""
    expected = max_length - buffer_length
    return min(-(length - expected) / buffer_length * factor, 0)


def openrlhf_overlong(length, max_length, buffer_length, factor):
    """OpenRLHF's ``apply_overlong_penalty``: the excess capped at the buffer."""
    assert max_length >= buffer_length
    exceed = min(length - (max_length - buffer_length), buffer_length)
    return -exceed / buffer_length * factor if exceed > 0 else 0.0


def exact_k3(log_ratio):
    """``exp(-d) - 1 + d`` in float64 by its series near 0 (the float64 reference of k3)."""
    d = -float(log_ratio)
    if abs(d) < 0.1:
        return sum(d**k / math.factorial(k) for k in range(2, 12))
    return math.expm1(d) - d
