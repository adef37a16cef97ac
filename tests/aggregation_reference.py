"""Float64 NumPy transcriptions of the trainers' loss aggregation.

Snapshots read (as in ``tests/token_reference.py``):

- verl   verl-project/verl   1dda039b9c6311889a9c9a26040677e1254814f9
         verl/trainer/ppo/core_algos.py (agg_loss: after #5417, the sequence mean of
         seq-mean-token-sum-norm and its default loss_scale_factor = loss_mask.shape[-1];
         every mode divides by the global count and multiplies by dp_size, which FSDP's
         mean of the ranks' gradients cancels: the dp_size**2 of #5798, a closed pull
         request, is in no line of this function), verl/utils/torch_functional.py
         (masked_sum)
- TRL    huggingface/trl     f2cd57710ae345ea6428ae95363267fcf38a3dc8
         trl/trainer/grpo_trainer.py (GRPOTrainer._compute_loss, the loss_type branches;
         num_items_in_batch: the generation batch's tokens gathered over processes)
- Tunix  google/tunix        c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3
         tunix/rl/common.py (aggregate_loss), tunix/sft/utils.py (WeightedMetric.compute);
         and Tunix 0.1.7 as installed, tunix/rl/common.py (aggregate_loss)

Each function keeps its trainer's arithmetic: the trainers multiply by the
mask, so a NaN at a masked-out position reaches their sums.
"""

import numpy as np


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def verl_agg_loss(
    loss_mat,
    loss_mask,
    loss_agg_mode,
    dp_size=1,
    batch_num_tokens=None,
    global_batch_size=None,
    loss_scale_factor=None,
):
    """The ``agg_loss`` of verl on one data-parallel rank's micro-batch."""
    loss_mat, loss_mask = _f64(loss_mat, loss_mask)

    def masked_sum(values, mask):
        return (np.where(mask.astype(bool), values, 0.0) * mask).sum()

    with np.errstate(invalid="ignore", divide="ignore"):
        if loss_agg_mode == "token-mean":
            if batch_num_tokens is None:
                assert dp_size == 1
                batch_num_tokens = loss_mask.sum()
            return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
        if loss_agg_mode == "token-sum":
            return masked_sum(loss_mat, loss_mask) * dp_size
        if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
            seq_losses = np.sum(loss_mat * loss_mask, axis=-1)
            seq_mask = (np.sum(loss_mask, axis=-1) > 0).astype(np.float64)
            if global_batch_size is None:
                assert dp_size == 1
                global_batch_size = seq_mask.sum()
            loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
            if loss_agg_mode == "seq-mean-token-sum-norm":
                if loss_scale_factor is None:
                    loss_scale_factor = loss_mask.shape[-1]
                loss /= loss_scale_factor
            return loss
        if loss_agg_mode == "seq-mean-token-mean":
            seq_mask = np.sum(loss_mask, axis=-1)
            seq_losses = np.sum(loss_mat * loss_mask, axis=-1) / (seq_mask + 1e-8)
            seq_mask = (seq_mask > 0).astype(np.float64)
            if global_batch_size is None:
                assert dp_size == 1
                global_batch_size = seq_mask.sum()
            return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")


def trl_loss(
    per_token_loss,
    mask,
    loss_type,
    max_completion_length=None,
    num_items_in_batch=None,
    num_processes=1,
    gradient_accumulation_steps=1,
):
    """TRL's ``GRPOTrainer`` loss of one process's micro-batch, in training mode.

    ``per_token_loss`` is ``(B, T)``, or ``(B, 1)`` for ``luspo``'s
    sequence-level losses; ``num_items_in_batch`` is ``dapo``'s token count of
    every process and micro-batch (this micro-batch's own by default).
    """
    per_token_loss, mask = _f64(per_token_loss, mask)
    normalizer = gradient_accumulation_steps
    if loss_type == "grpo":
        row_means = (per_token_loss * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)
        return row_means.mean() / normalizer
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / max(mask.sum(), 1.0) / normalizer
    if loss_type == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.shape[0] * max_completion_length)
        return loss / normalizer
    if loss_type == "dapo":
        if num_items_in_batch is None:
            num_items_in_batch = mask.sum()
        normalizer = max(num_items_in_batch, 1.0) / num_processes
        return (per_token_loss * mask).sum() / normalizer
    if loss_type == "luspo":
        return (per_token_loss * mask.sum(1, keepdims=True)).mean() / normalizer
    raise ValueError(f"Unknown loss type: {loss_type}")


def _weighted_metric(unreduced_sum, denominator, eps=None, min_denom=None):
    """Tunix's ``WeightedMetric(...).compute()``."""
    denom = denominator
    if eps is not None:
        denom = denom + eps
    if min_denom is not None:
        denom = max(denom, min_denom)
    safe = 1.0 if denom == 0 else denom
    return unreduced_sum * (0.0 if denom == 0 else 1.0 / safe)


def tunix_aggregate_loss(per_token_loss, completion_mask, loss_agg_mode, **kwargs):
    """Tunix's ``aggregate_loss`` (newest, unpacked rows), computed as its ``WeightedMetric``."""
    per_token_loss, completion_mask = _f64(per_token_loss, completion_mask)
    if loss_agg_mode == "token-mean":
        unreduced_sum = (per_token_loss * completion_mask).sum()
        denominator, min_denom = completion_mask.sum(), 1.0
    elif loss_agg_mode == "sequence-mean-token-mean":
        seq_mask = completion_mask.sum(axis=-1)
        seq_loss = (per_token_loss * completion_mask).sum(axis=-1) / np.maximum(seq_mask, 1.0)
        unreduced_sum = seq_loss.sum()
        denominator, min_denom = (seq_mask > 0).sum(), 1.0
    elif loss_agg_mode == "sequence-mean-token-scale":
        norm = float(kwargs.get("norm", per_token_loss.shape[-1]))
        seq_loss = (per_token_loss * completion_mask).sum(axis=-1) / max(norm, 1e-6)
        unreduced_sum = seq_loss.sum()
        denominator, min_denom = (completion_mask.sum(axis=-1) > 0).sum(), 1.0
    elif loss_agg_mode == "seq-mean-token-sum":
        seq_loss = (per_token_loss * completion_mask).sum(axis=-1)
        seq_mask = (completion_mask.sum(axis=-1) > 0).astype(np.float64)
        unreduced_sum = (seq_loss * seq_mask).sum()
        denominator, min_denom = seq_mask.sum(), 1e-6
    elif loss_agg_mode == "sequence-mean-token-sum-norm":
        norm = float(kwargs.get("norm", per_token_loss.shape[0]))
        unreduced_sum = (per_token_loss * completion_mask).sum()
        denominator, min_denom = norm, 1e-6
    else:
        raise ValueError(f"Unsupported loss aggregation mode: {loss_agg_mode}.")
    return _weighted_metric(unreduced_sum, float(denominator), min_denom=min_denom)


def tunix_017_aggregate_loss(per_token_loss, completion_mask, loss_agg_mode, **kwargs):
    """Tunix 0.1.7's ``aggregate_loss``: ``sequence-mean-token-sum-norm`` by the non-empty rows."""
    per_token_loss, completion_mask = _f64(per_token_loss, completion_mask)
    if loss_agg_mode != "sequence-mean-token-sum-norm":
        return tunix_aggregate_loss(per_token_loss, completion_mask, loss_agg_mode, **kwargs)
    non_zero_rows = max((completion_mask.sum(axis=-1) > 0).sum(), 1)
    norm = float(kwargs.get("norm", non_zero_rows))
    return (per_token_loss * completion_mask).sum() / max(norm, 1e-6)


def exact(losses, mask, mode, length=None):
    """The library's ``"exact"`` convention: verl's modes without its epsilon; no tokens give 0."""
    losses, mask = _f64(losses, mask)
    losses = np.where(mask != 0, losses, 0.0)
    tokens = mask.sum(-1)
    sequences = (tokens > 0).sum()
    sums = (losses * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        sums = sums / np.where(tokens > 0, tokens, 1.0)
    divisor = {
        "token-mean": tokens.sum(),
        "token-sum": 1.0,
        "seq-mean-token-sum": sequences,
        "seq-mean-token-mean": sequences,
        "seq-mean-token-sum-norm": sequences * (mask.shape[-1] if length is None else length),
    }[mode]
    return 0.0 if divisor == 0 else sums.sum() / divisor


def reference(convention, mode, losses, mask, length=None):
    """The trainer's number for one batch on one device, its defaults otherwise."""
    if convention == "exact":
        return exact(losses, mask, mode, length)
    if convention == "verl":
        return verl_agg_loss(losses, mask, mode, loss_scale_factor=length)
    if convention == "trl":
        if mode == "luspo":
            losses = np.asarray(losses)[:, :1]
        length = np.shape(mask)[-1] if length is None else length
        return trl_loss(losses, mask, mode, max_completion_length=length)
    scaled = length is not None and mode == "sequence-mean-token-scale"
    options = (
        {"norm": length} if scaled else {}
    )  # the norm of sequence-mean-token-sum-norm: a count
    return tunix_aggregate_loss(losses, mask, mode, **options)


def reference_gradient(convention, mode, losses, mask, length=None):
    """The gradient of the (linear) reference in the losses: its value at each unit loss."""
    shape = (np.shape(mask)[0], 1) if mode == "luspo" else np.shape(mask)
    gradient = np.zeros(shape)
    for index in np.ndindex(*shape):
        unit = np.zeros(shape)
        unit[index] = 1.0
        gradient[index] = reference(
            convention, mode, np.broadcast_to(unit, np.shape(mask)), mask, length
        )
    return gradient
