r"""What the loss aggregation does to response length: GRPO on a small policy, CPU.

The task: a prompt names a target :math:`t` from 1 to ``--max-target`` (20);
the response is a sequence of digits :math:`0 \ldots K - 1` (``--digits``
:math:`K`, 5) ended by an end-of-sequence token, at most ``--max-length``
(:math:`L`, 16) tokens. It is correct (reward 1, else 0) when its digits sum
to :math:`t` and it ends within the limit. Its length is free: 8 is ``4 4``
or ``2 2 2 2`` or ``1 0 3 0 4``, so that a correct response may be as short as
:math:`\lceil t / 4 \rceil` digits or as long as the limit, and a response
that has passed :math:`t` is wrong whatever follows. A response's length
counts its tokens, the end-of-sequence token included (a truncated one:
:math:`L`).

The policy is a GRU (``flax.linen``, 64 units) reading the target and then
its own tokens. Each update samples 16 targets and 8 responses to each,
computes GRPO's group advantages (``rn.group_advantages("grpo",
group_size=8)``), and takes one Adam step (learning rate 1e-3) on the
per-token policy-gradient losses :math:`-A_i \log \pi(o_{i,t})` (on-policy:
the clipped ratio is 1), aggregated by ``rn.aggregate_loss(losses, mask,
mode, convention="verl")`` over the :math:`B = 128` responses:

* ``seq-mean-token-mean`` (GRPO's): each response's mean over its tokens,
  then the mean over responses, a weight of :math:`A_i / (B |o_i|)` per token;
* ``seq-mean-token-sum-norm`` (Dr. GRPO's): the sum over all tokens divided
  by :math:`B L`, :math:`A_i / (B L)` per token;
* ``token-mean`` (DAPO's): the sum over all tokens divided by their number,
  :math:`A_i / \sum_j |o_j|` per token.

Only the first weights a token by the length of its own response: a wrong
answer (:math:`A_i < 0`) is pushed down less the longer it is, and a right
one up more the shorter it is (Liu et al, `Understanding R1-Zero-Like
Training <https://arxiv.org/abs/2503.20783>`_, 2025).

Seeds are vmapped in one jitted program, the updates in a ``lax.scan``, the
mode an argument of the program (one compilation for all); seed ``i`` starts
from the same parameters and draws the same keys in every mode, so the first
update's batch is the same in all three. It prints, per mode, the success
rate and the mean length of the correct and of the incorrect responses over
the first, the middle and the last tenth of the updates (a length is the mean
over all the responses of those updates), mean ± std over seeds, and writes
the curves to ``--plot``. The recorded run (5 seeds, 1000 updates) takes a
few minutes on one CPU core.

Usage::

    python -m benchmarks.length_bias --markdown --plot docs/_static/length_bias.png
    python -m benchmarks.length_bias --seeds 2 --updates 20  # a smoke run
"""

import argparse
import functools
import sys
import time
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import rewardnorm_jax as rn
from benchmarks._timing import command_line, environment, markdown_table, plain_table

PACKAGES = ("jax", "jaxlib", "flax", "optax")
MODES = ("seq-mean-token-mean", "seq-mean-token-sum-norm", "token-mean")
LABELS = {  # the trainer each mode is the loss of
    "seq-mean-token-mean": "GRPO",
    "seq-mean-token-sum-norm": "Dr. GRPO",
    "token-mean": "DAPO",
}
HIDDEN = 64
GROUP_SIZE = 8
LEARNING_RATE = 1e-3


class Config(NamedTuple):
    """The sizes of one run."""

    digits: int  # K: the response's digits are 0 to K - 1
    max_target: int  # targets are 1 to this
    max_length: int  # L: the most tokens of a response, end-of-sequence included
    prompts: int  # prompts per update (each answered GROUP_SIZE times)
    updates: int


class Curves(NamedTuple):
    """Per seed and update (shape ``(seeds, updates)``): counts and length sums of the batch."""

    correct: np.ndarray  # responses with reward 1
    incorrect: np.ndarray
    correct_length: np.ndarray  # the sum of their lengths
    incorrect_length: np.ndarray


class Policy(nn.Module):
    """A GRU over tokens: the next token's logits (a digit or the end) after each input token."""

    outputs: int  # K digits and the end of sequence
    vocab: int  # the outputs and the targets

    @nn.compact
    def __call__(self, carry: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
        carry, out = nn.GRUCell(HIDDEN)(carry, nn.Embed(self.vocab, HIDDEN)(token))
        return carry, nn.Dense(self.outputs)(out)


def make_train(config: Config):
    """A function of a seed's key and a mode's index in ``MODES``: the seed's :class:`Curves`.

    The mode is an argument of the program, so that one compilation serves every mode.
    """
    digits, length = config.digits, config.max_length
    eos = digits
    policy = Policy(digits + 1, digits + 2 + config.max_target)
    optimizer = optax.adam(LEARNING_RATE)
    grpo = rn.group_advantages("grpo", group_size=GROUP_SIZE)
    batch = config.prompts * GROUP_SIZE

    def step(params, carry, token):
        return policy.apply(params, carry, token)

    def read_prompt(params, targets):
        return step(params, jnp.zeros((batch, HIDDEN)), digits + 1 + targets)

    def sample(params, targets, key):
        def next_token(state, key):
            carry, logits = state
            token = jax.random.categorical(key, logits)
            return step(params, carry, token), token

        state = read_prompt(params, targets)
        _, tokens = jax.lax.scan(next_token, state, jax.random.split(key, length))
        return tokens.T  # (batch, length)

    def log_probs(params, targets, tokens):
        def next_log_prob(state, token):
            carry, logits = state
            log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), token[:, None], axis=1)
            return step(params, carry, token), log_prob[:, 0]

        state = read_prompt(params, targets)
        _, out = jax.lax.scan(next_log_prob, state, tokens.T)
        return out.T

    def score(targets, tokens):
        """Rewards, lengths and the response mask of sampled tokens."""
        ended = tokens == eos
        finished = ended.any(axis=1)
        lengths = jnp.where(finished, ended.argmax(axis=1) + 1, length)
        mask = jnp.arange(length) < lengths[:, None]
        total = jnp.where(mask & ~ended, tokens, 0).sum(axis=1)
        rewards = (finished & (total == targets)).astype(jnp.float32)
        return rewards, lengths, mask

    def loss(params, targets, tokens, advantages, mask, mode_index):
        losses = -advantages[:, None] * log_probs(params, targets, tokens)
        by_mode = [rn.aggregate_loss(losses, mask, mode, convention="verl") for mode in MODES]
        return jnp.stack(by_mode)[mode_index]

    def update(carry, key, mode_index):
        params, opt_state = carry
        prompt_key, sample_key = jax.random.split(key)
        targets = jax.random.randint(prompt_key, (config.prompts,), 1, config.max_target + 1)
        targets = jnp.repeat(targets, GROUP_SIZE)
        tokens = sample(params, targets, sample_key)
        rewards, lengths, mask = score(targets, tokens)
        advantages = grpo.apply(rewards).advantages
        grads = jax.grad(loss)(params, targets, tokens, advantages, mask, mode_index)
        changes, opt_state = optimizer.update(grads, opt_state)
        correct = rewards > 0
        curves = (
            correct.sum(),
            (~correct).sum(),
            jnp.where(correct, lengths, 0).sum(),
            jnp.where(correct, 0, lengths).sum(),
        )
        return (optax.apply_updates(params, changes), opt_state), curves

    def train(key, mode_index):
        init_key, run_key = jax.random.split(key)
        params = policy.init(init_key, jnp.zeros((batch, HIDDEN)), jnp.zeros(batch, jnp.int32))
        carry = (params, optimizer.init(params))
        keys = jax.random.split(run_key, config.updates)
        _, curves = jax.lax.scan(functools.partial(update, mode_index=mode_index), carry, keys)
        return curves

    return train


@functools.cache
def compiled_train(config: Config):
    """Every seed of a mode, vmapped in one jitted program: a function of the keys and the mode."""
    return jax.jit(jax.vmap(make_train(config), in_axes=(0, None)))


def run(config: Config, mode: str, num_seeds: int, seed: int) -> tuple[Curves, float]:
    """Every seed of one mode: the curves and the seconds (the first mode's with compilation)."""
    keys = jax.random.split(jax.random.key(seed), num_seeds)
    start = time.perf_counter()
    curves = jax.block_until_ready(compiled_train(config)(keys, MODES.index(mode)))
    seconds = time.perf_counter() - start
    return Curves(*(np.asarray(curve) for curve in curves)), seconds


class Window(NamedTuple):
    """Per seed, over a window of updates: the success rate and the mean lengths."""

    success: np.ndarray  # (seeds,)
    correct_length: np.ndarray  # NaN: no correct response in the window
    incorrect_length: np.ndarray


def rates(sums: Sequence[np.ndarray]) -> Window:
    """The success rate and mean lengths from :class:`Curves`' four fields summed over updates."""
    correct, incorrect, correct_length, incorrect_length = (x.astype(float) for x in sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        return Window(
            correct / (correct + incorrect), correct_length / correct, incorrect_length / incorrect
        )


def window(curves: Curves, updates: slice) -> Window:
    """Per seed, over the window of ``updates``: all its responses counted together."""
    return rates([curve[:, updates].sum(axis=1) for curve in curves])


def smoothed(curves: Curves, width: int) -> Window:
    """Per seed and update, over the ``width`` updates up to it (from update ``width``)."""
    kernel = np.ones(width)
    return rates(
        [np.stack([np.convolve(row, kernel, mode="valid") for row in curve]) for curve in curves]
    )


def mean_std(values: np.ndarray, decimals: int) -> str:
    """``mean ± std`` over the seeds with a value (NaN: none), and how many when not all."""
    known = values[np.isfinite(values)]
    if known.size == 0:
        return "none"
    text = f"{known.mean():.{decimals}f} ± {known.std():.{decimals}f}"
    return text if known.size == values.size else f"{text} ({known.size} of {values.size} seeds)"


HEADERS = [
    "aggregation",
    "updates",
    "success rate",
    "length, correct",
    "length, incorrect",
]


def rows(mode: str, curves: Curves) -> list[list[str]]:
    """The table's rows of one mode: its first, middle and last tenth of the updates."""
    updates = curves.correct.shape[1]
    tenth = max(updates // 10, 1)
    found = []
    for start in (0, (updates - tenth) // 2, updates - tenth):
        stats = window(curves, slice(start, start + tenth))
        found.append(
            [
                f"{mode} ({LABELS[mode]})",
                f"{start + 1}-{start + tenth}",
                mean_std(stats.success, 2),
                mean_std(stats.correct_length, 1),
                mean_std(stats.incorrect_length, 1),
            ]
        )
    return found


def plot(results: dict[str, Curves], config: Config, path: str) -> None:
    """Three panels against the update: success rate, length of correct and incorrect answers.

    Mean over seeds of a moving window of a twentieth of the run; one std over seeds shaded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 12})
    width = max(config.updates // 20, 1)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    titles = ("success rate", "mean length, correct", "mean length, incorrect")
    for mode, curves in results.items():
        stats = smoothed(curves, width)
        x = np.arange(width, config.updates + 1)
        color = f"C{MODES.index(mode)}"
        for ax, values in zip(axes, stats, strict=True):
            with warnings.catch_warnings():  # an update where no seed has such a response
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, std = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
            ax.plot(x, mean, color=color, lw=1.6, label=f"{mode} ({LABELS[mode]})")
            ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15)
    seeds = len(next(iter(results.values())).correct)
    for ax, title in zip(axes, titles, strict=True):
        ax.set(title=title, xlabel="update")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1)
    for ax in axes[1:]:
        ax.set_ylim(0, config.max_length + 0.5)
        ax.axhline(config.max_length, color="gray", lw=0.8, ls=":")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False)
    fig.suptitle(f"{seeds} seeds", x=0.99, ha="right", y=0.995, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per update")
    parser.add_argument("--digits", type=int, default=5)
    parser.add_argument("--max-target", type=int, default=20)
    parser.add_argument("--max-length", type=int, default=16)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--plot",
        default="",
        help="write the curves to this PNG (the recorded run: docs/_static/length_bias.png)",
    )
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Curves]:
    """Trains every mode; prints the table, writes the curves; returns the curves by mode."""
    args = parse_args(argv)
    config = Config(args.digits, args.max_target, args.max_length, args.prompts, args.updates)
    print(f"Command: `{command_line()}`", flush=True)
    print(f"Machine: {environment(PACKAGES)}", flush=True)
    results, table, walls = {}, [], []
    for mode in args.modes:
        results[mode], seconds = run(config, mode, args.seeds, args.seed)
        table += rows(mode, results[mode])
        walls.append(f"{mode} {seconds:.0f} s")
        print("done:", " | ".join(table[-1]), file=sys.stderr, flush=True)
    print(
        f"\n### GRPO with each loss aggregation: {args.seeds} seeds, {args.updates} updates "
        f"of {args.prompts} prompts x {GROUP_SIZE} answers, K = {args.digits}, "
        f"targets to {args.max_target}, "
        f"L = {args.max_length}\n"
    )
    print(markdown_table(HEADERS, table) if args.markdown else plain_table(HEADERS, table))
    print(f"\nWall time (the first mode's with the compilation): {', '.join(walls)}")
    if args.plot:
        plot(results, config, args.plot)
        print(f"Curves: {args.plot}")
    return results


if __name__ == "__main__":
    main()
