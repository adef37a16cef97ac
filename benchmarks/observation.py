"""Normalizing a stream of (N, D) observations: ours vs PureJaxRL's and Brax's normalizers.

Every variant is a jitted ``lax.scan`` over ``T`` steps of ``N`` environments
with ``D``-dimensional float32 observations (by default 17, a Brax ant-like
size; features of different scales and offsets) that writes one normalized
observation per input, so they differ only in the normalizer:

* ``ours``: ``rewardnorm_jax.normalize_observation("purejaxrl").step`` (update,
  then normalize; exact count, compensated mean, non-finite entries left out);
* ``ours brax``: ``normalize_observation("brax").step`` (normalize with the
  statistics from before the update, then update);
* ``ours brax finite``: ``normalize_observation("brax",
  finite_observations=True).step``: the same, promised finite observations
  (no non-finite mask, count or shift search);
* ``purejaxrl``: PureJaxRL's ``NormalizeVecObservation`` arithmetic, its
  statistics of the batch's shape ``(N, 17)`` as it keeps them;
* ``brax``: Brax's ``running_statistics.normalize`` then ``update`` (Welford
  mode, ``UInt64`` count), when Brax is installed.

It prints microseconds per step (the median over ``--rounds`` rounds of the
minimum over ``--repeats`` alternating calls, ``_timing.py``; each ratio is
the median of the rounds' ratios), the kernels one step of each scan launches
(``loop_kernels``), and each variant's largest error in standard deviations
(the normalized outputs' units) against the same arithmetic in float64:
PureJaxRL's for ``ours`` and ``purejaxrl``, Brax's for ``ours brax``, ``ours
brax finite`` and ``brax``.

Usage::

    python -m benchmarks.observation                 # N = 64, 1024, 4096, 65536
    python -m benchmarks.observation --sizes 4096 --markdown
    python -m benchmarks.observation --sizes 64 1024 --dims 4 11 17 64 244
"""

import argparse
import functools
import itertools
import statistics

import jax
import jax.numpy as jnp
import numpy as np

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, loop_kernels, print_results

DIM = 17

try:
    from brax.training.acme import running_statistics
except ImportError:  # the brax extra is optional here
    running_statistics = None


def make_stream(steps: int, num_envs: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    """Float32 observations ``(steps, num_envs, dim)``: scales 1e-2..1e2, offsets -5..5."""
    rng = np.random.default_rng(seed)
    scale = np.logspace(-2, 2, dim)
    offset = np.linspace(-5, 5, dim)
    return (rng.standard_normal((steps, num_envs, dim)) * scale + offset).astype(np.float32)


def scan_ours(preset: str, **options):
    norm = rn.normalize_observation(preset, **options)

    def run(stream):
        def body(state, obs):
            out, state = norm.step(state, obs)
            return state, out

        return jax.lax.scan(body, norm.init(jnp.zeros(stream.shape[2:])), stream)[1]

    return jax.jit(run)


def _purejaxrl_update(mean, var, count, obs):
    """PureJaxRL's NormalizeVecObservation step, as its wrappers.py writes it."""
    batch_mean = jnp.mean(obs, axis=0)
    batch_var = jnp.var(obs, axis=0)
    batch_count = obs.shape[0]
    delta = batch_mean - mean
    tot_count = count + batch_count
    new_mean = mean + delta * batch_count / tot_count
    m_a = var * count
    m_b = batch_var * batch_count
    m2 = m_a + m_b + jnp.square(delta) * count * batch_count / tot_count
    return new_mean, m2 / tot_count, tot_count


@jax.jit
def scan_purejaxrl(stream):
    def body(carry, obs):
        mean, var, count = _purejaxrl_update(carry[0], carry[1], carry[2], obs)
        return (mean, var, count), (obs - mean) / jnp.sqrt(var + 1e-8)

    shape = stream.shape[1:]
    start = (jnp.zeros(shape), jnp.ones(shape), jnp.float32(1e-4))
    return jax.lax.scan(body, start, stream)[1]


@jax.jit
def scan_brax(stream):
    def body(state, obs):
        out = running_statistics.normalize(obs, state)
        return running_statistics.update(state, obs), out

    start = running_statistics.init_state(jnp.zeros(stream.shape[2:], stream.dtype))
    return jax.lax.scan(body, start, stream)[1]


def measure(num_envs: int, steps: int, repeats: int, dim: int = DIM, rounds: int = 1) -> dict:
    stream = jnp.asarray(make_stream(steps, num_envs, dim))
    variants = {
        "ours": scan_ours("purejaxrl"),
        "ours brax": scan_ours("brax"),
        "ours brax finite": scan_ours("brax", finite_observations=True),
    }
    variants["purejaxrl"] = scan_purejaxrl
    if running_statistics is not None:
        variants["brax"] = scan_brax
    outputs = {name: np.asarray(fn(stream), np.float64) for name, fn in variants.items()}
    with jax.enable_x64(True):  # the references: the same arithmetic in float64
        stream64 = jnp.asarray(np.asarray(stream), jnp.float64)
        truths = {"purejaxrl": np.asarray(scan_purejaxrl(stream64))}
        if running_statistics is not None:
            truths["brax"] = np.asarray(scan_brax(stream64))
    of = {"ours": "purejaxrl", "purejaxrl": "purejaxrl", "brax": "brax"}
    of |= {"ours brax": "brax", "ours brax finite": "brax"}
    errors = {
        name: np.abs(out - truths[of[name]]).max()
        for name, out in outputs.items()
        if of[name] in truths
    }
    kernels = {name: loop_kernels(fn, stream) for name, fn in variants.items()}
    calls = {name: functools.partial(fn, stream) for name, fn in variants.items()}
    found = [compare(calls, repeats) for _ in range(rounds)]  # each round interleaved
    return {
        "us": {name: statistics.median(s[name] for s in found) / steps * 1e6 for name in calls},
        "ratio": lambda a, b: statistics.median(s[a] / s[b] for s in found),
        "kernels": kernels,
        "errors": errors,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[64, 1024, 4096, 65536],
        help="numbers of environments N (default: 64 1024 4096 65536)",
    )
    parser.add_argument(
        "--dims",
        type=int,
        nargs="+",
        default=[DIM],
        help=f"features per observation D (default: {DIM})",
    )
    parser.add_argument("--steps", type=int, default=200, help="stream length T (default 200)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved timing rounds; times and ratios are their medians (default 5)",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    rows = []
    for dim, num_envs in itertools.product(args.dims, args.sizes):
        found = measure(num_envs, args.steps, args.repeats, dim, args.rounds)
        us, kernels, errors, ratio = found["us"], found["kernels"], found["errors"], found["ratio"]
        has_brax = "brax" in us
        brax_names = ("ours brax", "ours brax finite", "brax")
        rows.append(
            [
                dim,
                num_envs,
                us["ours"],
                us["purejaxrl"],
                ratio("ours", "purejaxrl"),
                us["ours brax"],
                us["ours brax finite"],
                us.get("brax", float("nan")),
                ratio("ours brax", "brax") if has_brax else float("nan"),
                ratio("ours brax finite", "brax") if has_brax else float("nan"),
                " / ".join(str(kernels.get(name, "-")) for name in ("ours", "purejaxrl")),
                " / ".join(str(kernels.get(name, "-")) for name in brax_names),
                " / ".join(f"{errors[name]:.1e}" for name in ("ours", "purejaxrl")),
                " / ".join(f"{errors.get(name, np.nan):.1e}" for name in brax_names),
            ]
        )
    headers = [
        "D",
        "N",
        "ours us/step",
        "purejaxrl us/step",
        "ours/purejaxrl",
        "ours brax us/step",
        "ours brax finite us/step",
        "brax us/step",
        "ours brax/brax",
        "ours brax finite/brax",
        "kernels ours / purejaxrl",
        "kernels ours brax / finite / brax",
        "error ours / purejaxrl",
        "error ours brax / finite / brax",
    ]
    print_results(
        f"Observation normalization, {args.steps} steps of (N, D) float32 observations "
        f"(medians of {args.rounds} interleaved rounds)",
        headers,
        rows,
        args.markdown,
        packages=("jax", "jaxlib", "numpy", "brax"),
    )


if __name__ == "__main__":
    main()
