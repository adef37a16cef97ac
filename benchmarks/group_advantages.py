"""Group advantages against the plain JAX a trainer writes: reshape, mean, std.

For ``P`` prompts of ``G`` answers (``--shapes PxG``, default 4096x16:
65,536 float32 rewards), side by side in one run (``_timing.compare``), each
jitted:

* ``plain``: ``(r - mean) / (std + 1e-6)`` over ``r.reshape(P, G)``, the
  ddof-1 standard deviation (Tunix's and verl's GRPO, written in JAX);
* ``grpo exact`` / ``grpo tunix``: ``rn.group_advantages`` with contiguous
  groups, in the library's convention (no epsilon, NaN left out) and Tunix's
  (epsilon 1e-6, a NaN spreads in its group);
* ``plain ragged``: the same formula over ragged ids with ``segment_sum``;
* ``grpo ragged``: the library with the same ragged ids (shuffled, uneven
  groups averaging ``G`` answers).

Every variant is timed on random rewards without constant groups, where
both conventions agree with ``plain`` to float32 rounding (an epsilon of
1e-6 against none moves a standardized value by about 1e-6); the script
checks that before timing.

Usage::

    python -m benchmarks.group_advantages
    python -m benchmarks.group_advantages --shapes 4096x16 1024x64 --markdown
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import rewardnorm_jax as rn
from benchmarks._timing import add_common_args, compare, print_results


def plain(rewards, group_size: int):
    """GRPO as trainers write it: reshape, mean, ddof-1 std, epsilon 1e-6."""
    grouped = rewards.reshape(-1, group_size)
    mean = grouped.mean(axis=1, keepdims=True)
    std = grouped.std(axis=1, ddof=1, keepdims=True)
    return ((grouped - mean) / (std + 1e-6)).reshape(-1)


def plain_ragged(rewards, ids, num_groups: int):
    """The same formula over ragged ids, with segment sums."""
    count = jax.ops.segment_sum(jnp.ones_like(rewards), ids, num_groups)
    mean = jax.ops.segment_sum(rewards, ids, num_groups) / count
    deviation = rewards - mean[ids]
    var = jax.ops.segment_sum(deviation * deviation, ids, num_groups) / (count - 1)
    return deviation / (jnp.sqrt(var)[ids] + 1e-6)


def variants(num_prompts: int, group_size: int):
    """Name -> (jitted function, whether it takes ragged ids)."""
    found = {
        "plain": (jax.jit(lambda r: plain(r, group_size)), False),
    }
    for convention in ("exact", "tunix"):
        estimate = rn.group_advantages("grpo", convention=convention, group_size=group_size)
        found[f"grpo {convention}"] = (jax.jit(lambda r, e=estimate: e.apply(r).advantages), False)
    found["plain ragged"] = (jax.jit(lambda r, i: plain_ragged(r, i, num_prompts)), True)
    ragged = rn.group_advantages("grpo", num_groups=num_prompts)
    found["grpo ragged"] = (jax.jit(lambda r, i: ragged.apply(r, group_ids=i).advantages), True)
    return found


def measure(num_prompts: int, group_size: int, repeats: int) -> list[list]:
    """Rows: each variant's microseconds per call, its ratio to ``plain``, its largest deviation."""
    rng = np.random.default_rng(0)
    rewards = jnp.asarray(rng.standard_normal(num_prompts * group_size, dtype=np.float32))
    ids = jnp.asarray(rng.permutation(num_prompts * group_size) % num_prompts, jnp.int32)
    found = variants(num_prompts, group_size)
    reference = {False: plain(rewards, group_size), True: plain_ragged(rewards, ids, num_prompts)}
    calls, deviations = {}, {}
    for name, (fn, ragged) in found.items():
        args = (rewards, ids) if ragged else (rewards,)
        calls[name] = lambda fn=fn, args=args: fn(*args)
        deviations[name] = float(jnp.max(jnp.abs(fn(*args) - reference[ragged])))
        if deviations[name] > 1e-4:
            raise AssertionError(f"{name} differs from the plain formula by {deviations[name]}")
    seconds = compare(calls, repeats)
    return [
        [
            f"{num_prompts}x{group_size}",
            name,
            seconds[name] * 1e6,
            seconds[name] / seconds["plain"],
            seconds[name] / seconds["plain ragged"],
            deviations[name],
        ]
        for name in found
    ]


def shape(text: str) -> tuple[int, int]:
    """``"4096x16"`` -> ``(4096, 16)``."""
    prompts, size = text.lower().split("x")
    return int(prompts), int(size)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", type=shape, nargs="+", default=[(4096, 16)], help="prompts x group size"
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    headers = ["P x G", "variant", "us/call", "/plain", "/plain ragged", "max abs diff"]
    rows = [row for p, g in args.shapes for row in measure(p, g, args.repeats)]
    print_results("Group advantages, float32", headers, rows, args.markdown)


if __name__ == "__main__":
    main()
