"""The float32 residue of the trainers' formulas where the exact answer is 0 (or tiny).

Each row evaluates a trainer's formula as its code writes it, in float32
(jitted JAX, standing in for its torch or NumPy code), beside the library's
function on the same float32 inputs:

* GRPO on constant groups (every answer the same reward, exact advantage 0):
  ``(r - mean) / (std + eps)`` with each trainer's epsilon (TRL 1e-4, verl
  1e-6, OpenRLHF 1e-9), against ``rn.group_advantages``. Tunix runs the same
  formula in float64 NumPy, where these groups of float32 values give 0;
* masked whitening of a constant batch of token values: verl's and Tunix's
  ``(x - mean) * rsqrt(var + 1e-8)``, against ``rn.masked_whiten``; their mean
  divides by the count plus 1e-8, so the exact value is not 0 but about
  ``1e-4 c / n`` (computed in float64), and the rows give the distance from it;
* the k3 KL estimate near the reference (exact value about d^2 / 2): the
  trainers' ``exp(d) - d - 1``, against ``rn.kl_estimate``; the error is
  relative to the float64 value.

A row's constant is stored in float32 first: a constant of 0.1 is the float32
value nearest 0.1, repeated. The residue depends on the reduction order,
which XLA chooses per machine; the rows show its size, not digits to expect.

Usage::

    python -m benchmarks.float32_residue --markdown
"""

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np

import rewardnorm_jax as rn

GRPO_EPSILON = {"trl": 1e-4, "verl": 1e-6, "openrlhf": 1e-9}
CONSTANTS = (0.1, 1000 / 7, 0.7, 3.3)
GROUP_SIZES = (7, 16, 64)


@jax.jit
def _plain_grpo(grouped, epsilon):
    mean = grouped.mean(axis=1, keepdims=True)
    return (grouped - mean) / (jnp.std(grouped, axis=1, ddof=1, keepdims=True) + epsilon)


@jax.jit
def _plain_whiten(values, mask):
    mask = mask.astype(values.dtype)
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    var = ((values - mean) ** 2 * mask).sum() / (mask.sum() + 1e-8)
    var = var * mask.sum() / (mask.sum() - 1)
    return (values - mean) * jax.lax.rsqrt(var + 1e-8) * mask


@jax.jit
def _plain_k3(log_probs, ref_log_probs):
    d = ref_log_probs - log_probs
    return jnp.exp(d) - d - 1


def grpo_rows() -> list[tuple[str, str, float, float]]:
    """The largest |advantage| of constant groups, upstream and library, per convention."""
    rows = []
    for convention, epsilon in GRPO_EPSILON.items():
        upstream = library = 0.0
        for size in GROUP_SIZES:
            rewards = np.repeat(np.asarray(CONSTANTS, np.float32), size)
            grouped = jnp.asarray(rewards.reshape(-1, size))
            upstream = max(upstream, float(jnp.abs(_plain_grpo(grouped, epsilon)).max()))
            estimator = rn.group_advantages("grpo", convention=convention, group_size=size)
            out = jax.jit(estimator.apply)(rewards).advantages
            library = max(library, float(jnp.abs(out).max()))
        sizes = ", ".join(map(str, GROUP_SIZES))
        rows.append((f"grpo, {convention}", f"constant groups of {sizes}", upstream, library))
    return rows


def whitening_rows() -> list[tuple[str, str, float, float]]:
    """The largest distance from the exact value, constant batches of 64 x 256 tokens."""
    rng = np.random.default_rng(0)
    mask = np.arange(256) < rng.integers(1, 257, (64, 1))
    upstream = library = 0.0
    for constant in CONSTANTS:
        values = np.full(mask.shape, constant, np.float32)
        exact = np.where(
            mask, _exact_constant_whitening(float(np.float32(constant)), mask.sum()), 0
        )
        upstream = max(upstream, float(np.abs(_plain_whiten(values, mask) - exact).max()))
        out = rn.masked_whiten(values, mask, convention="verl")
        library = max(library, float(np.abs(out - exact).max()))
    return [("masked whitening, verl / tunix", "constant batches", upstream, library)]


def _exact_constant_whitening(constant: float, count: int) -> float:
    """Verl's and Tunix's whitening of ``count`` tokens of ``constant``, in exact arithmetic.

    Their mean sits ``1e-8 c / (n + 1e-8)`` below the values; the variance of
    that offset is below the 1e-8 guard.
    """
    offset = 1e-8 * constant / (count + 1e-8)
    variance = count * offset**2 / (count + 1e-8) * count / (count - 1)
    return offset / math.sqrt(variance + 1e-8)


def k3_rows() -> list[tuple[str, str, float, float]]:
    """The relative error of k3 at log ratios near 0, upstream and library."""
    rows = []
    ref = np.full(1, -1.0, np.float32)
    for ratio in (1e-2, 1e-3, 1e-4):
        log_probs = ref + np.float32(ratio)
        delta = float(log_probs[0]) - float(ref[0])  # the float32 inputs' exact log ratio
        exact = math.expm1(-delta) + delta
        upstream = float(_plain_k3(log_probs, ref)[0])
        library = float(rn.kl_estimate(log_probs, ref, estimator="k3")[0])
        rows.append(
            (
                "k3, relative error",
                f"log ratio {ratio:g}",
                abs(upstream / exact - 1),
                abs(library / exact - 1),
            )
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    rows = grpo_rows() + whitening_rows() + k3_rows()
    where = f"jax {jax.__version__}, {jax.devices()[0].platform}"
    if args.markdown:
        print(f"### Float32 residue ({where})\n")
        print("| formula | inputs | trainer's formula, float32 | library |")
        print("|---|---|---|---|")
        for name, inputs, upstream, library in rows:
            print(f"| {name} | {inputs} | {upstream:.3g} | {library:.3g} |")
    else:
        print(f"{where}, float32")
        for name, inputs, upstream, library in rows:
            print(f"{name:34s} {inputs:34s} upstream {upstream:10.3g}  library {library:10.3g}")


if __name__ == "__main__":
    main()
