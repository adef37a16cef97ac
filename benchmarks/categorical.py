"""Categorical targets against rlax and the shortest hand-rolled forms, side by side.

For ``B`` targets (``--batch``, default 4096) and ``K`` atoms (``--atoms``,
default 101 and 255), each jitted and timed in turn in one process
(``_timing.compare``), float32:

* **encode**: ``rn.two_hot`` on a uniform support, against DreamerV3's
  two-hot as its code writes it (compare every atom, one-hots) and rlax's
  ``transform_to_2hot``; ``rn.hl_gauss`` beside them;
* **decode**: ``rn.decode_logits`` against ``(softmax(logits) * atoms).sum(-1)``;
* **loss**: ``rn.categorical_cross_entropy`` against
  ``optax.softmax_cross_entropy(...).mean()``;
* **projection**: ``rn.categorical_projection`` against rlax's
  ``categorical_l2_project`` (vmapped: a ``K x K`` matrix per sample) and a
  FastTD3-style projection (floor / ceil indices with the ``l == u`` patch,
  two scatter-adds).

``/best hand-rolled`` is each variant's time over the fastest other variant
of its operation; ``max abs diff`` its largest difference from the library's
result (rlax's two-hot differs by its epsilon's bias).

Usage::

    python -m benchmarks.categorical
    python -m benchmarks.categorical --atoms 101 255 --repeats 100 --markdown
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
import rlax

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, print_results

V_MIN, V_MAX = -10.0, 10.0


def dreamer_two_hot(x, bins):
    """DreamerV3's two-hot: the atoms below and above by comparing every atom."""
    num = bins.shape[0]
    below = jnp.clip((bins <= x[:, None]).astype(jnp.int32).sum(-1) - 1, 0, num - 1)
    above = jnp.clip(num - (bins > x[:, None]).astype(jnp.int32).sum(-1), 0, num - 1)
    equal = below == above
    to_below = jnp.where(equal, 1, jnp.abs(bins[below] - x))
    to_above = jnp.where(equal, 1, jnp.abs(bins[above] - x))
    total = to_below + to_above
    return (
        jax.nn.one_hot(below, num) * (to_above / total)[:, None]
        + jax.nn.one_hot(above, num) * (to_below / total)[:, None]
    )


def fast_td3_projection(probs, rewards, discounts, num_atoms):
    """A FastTD3-style C51 projection: floor / ceil indices, the l == u patch, scatter-adds."""
    z = jnp.linspace(V_MIN, V_MAX, num_atoms)
    dz = (V_MAX - V_MIN) / (num_atoms - 1)
    b = (jnp.clip(rewards[:, None] + discounts[:, None] * z, V_MIN, V_MAX) - V_MIN) / dz
    lower, upper = jnp.floor(b).astype(jnp.int32), jnp.ceil(b).astype(jnp.int32)
    lower = jnp.where((upper > 0) & (lower == upper), lower - 1, lower)
    upper = jnp.where((lower < num_atoms - 1) & (lower == upper), upper + 1, upper)
    rows = jnp.arange(probs.shape[0])[:, None]
    out = jnp.zeros_like(probs).at[rows, lower].add(probs * (upper - b))
    return out.at[rows, upper].add(probs * (b - lower))


def operations(batch: int, num_atoms: int) -> dict[str, dict[str, tuple]]:
    """Operation -> variant -> (jitted function, its arguments); the library's first."""
    rng = np.random.default_rng(0)
    support = rn.uniform_support(V_MIN, V_MAX, num_atoms)
    atoms = support.atoms
    targets = jnp.asarray(rng.uniform(V_MIN * 1.1, V_MAX * 1.1, batch), jnp.float32)
    logits = jnp.asarray(rng.standard_normal((batch, num_atoms)) * 3, jnp.float32)
    probs = jax.nn.softmax(logits)
    labels = rn.two_hot(targets, support)
    rewards = jnp.asarray(rng.uniform(-2, 2, batch), jnp.float32)
    discounts = jnp.asarray(0.99 * (rng.random(batch) > 0.1), jnp.float32)
    return {
        "encode": {
            "library two_hot": (jax.jit(lambda y: rn.two_hot(y, support)), (targets,)),
            "DreamerV3 two-hot": (jax.jit(lambda y: dreamer_two_hot(y, atoms)), (targets,)),
            "rlax transform_to_2hot": (
                jax.jit(lambda y: rlax.transform_to_2hot(y, V_MIN, V_MAX, num_atoms)),
                (targets,),
            ),
            "library hl_gauss": (jax.jit(lambda y: rn.hl_gauss(y, support)), (targets,)),
        },
        "decode": {
            "library decode_logits": (
                jax.jit(lambda lg: rn.decode_logits(lg, support)),
                (logits,),
            ),
            "softmax * atoms": (
                jax.jit(lambda lg: (jax.nn.softmax(lg) * atoms).sum(-1)),
                (logits,),
            ),
        },
        "loss": {
            "library cross-entropy": (
                jax.jit(lambda lg, t: rn.categorical_cross_entropy(lg, t)),
                (logits, labels),
            ),
            "optax softmax_cross_entropy": (
                jax.jit(lambda lg, t: optax.softmax_cross_entropy(lg, t).mean()),
                (logits, labels),
            ),
        },
        "projection": {
            "library projection": (
                jax.jit(
                    lambda p, r, d: rn.categorical_projection(p, support, rewards=r, discounts=d)
                ),
                (probs, rewards, discounts),
            ),
            "rlax categorical_l2_project": (
                jax.jit(
                    jax.vmap(lambda p, r, d: rlax.categorical_l2_project(r + d * atoms, p, atoms))
                ),
                (probs, rewards, discounts),
            ),
            "FastTD3-style loop": (
                jax.jit(lambda p, r, d: fast_td3_projection(p, r, d, num_atoms)),
                (probs, rewards, discounts),
            ),
        },
    }


def measure(batch: int, num_atoms: int, repeats: int) -> list[list]:
    """Rows: each variant's microseconds per call, its ratio to the fastest other, its deviation."""
    rows = []
    for operation, variants in operations(batch, num_atoms).items():
        calls = {
            name: (lambda fn=fn, args=args: fn(*args)) for name, (fn, args) in variants.items()
        }
        library = next(iter(calls.values()))()
        seconds = compare(calls, repeats)
        for name in variants:
            others = [
                seconds[other] for other in variants if other != name and "hl_gauss" not in other
            ]
            deviation = float(jnp.max(jnp.abs(calls[name]() - library)))
            if "hl_gauss" in name:
                deviation = float("nan")  # another encoder, not comparable
            rows.append(
                [
                    f"{batch}x{num_atoms}",
                    operation,
                    name,
                    seconds[name] * 1e6,
                    seconds[name] / min(others),
                    deviation,
                ]
            )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4096, help="targets per call")
    parser.add_argument("--atoms", type=int, nargs="+", default=[101, 255], help="K")
    add_common_args(parser)
    args = parser.parse_args(argv)
    headers = ["B x K", "operation", "variant", "us/call", "/best other", "max abs diff"]
    rows = [row for k in args.atoms for row in measure(args.batch, k, args.repeats)]
    print_results(
        "Categorical targets, float32",
        headers,
        rows,
        args.markdown,
        packages=("jax", "jaxlib", "numpy", "rlax", "optax"),
    )


if __name__ == "__main__":
    main()
