"""The compiled step launches no more kernels than the naive normalizer (no timing).

The kernels one ``lax.scan`` step launches (fusions, library calls, copies,
nested loops, as counted by ``benchmarks/_timing.py``'s ``loop_kernels`` in
the optimized HLO) are the per-step overhead of a scan on XLA:CPU, and on an
accelerator every kernel is a launch. The reference is the naive normalizer
users would otherwise paste (``benchmarks/stream.py``'s ``inline_step``:
PureJaxRL's arithmetic, no masks, no NaN handling).
"""

import re

import jax
import jax.numpy as jnp
import pytest

import rewardnorm_jax as rn
from benchmarks import stream
from benchmarks._timing import loop_body, loop_kernels

STEPS = 16  # the loop body does not depend on the stream's length
# XLA:CPU runs a scan body of at most this many kernels inline on the calling
# thread; a longer one is dispatched as a task graph, which costs per kernel.
INLINE_KERNELS = 8


def scans():
    default = rn.normalize_reward(stream.GAMMA, stream.EPSILON)
    fast = rn.normalize_reward(stream.GAMMA, stream.EPSILON, finite_rewards=True)
    return {
        "naive": stream.naive_scan,
        "default, active mask": stream.step_scan(default, with_active=True),
        "default": stream.step_scan(default, with_active=False),
        "finite rewards, no mask": stream.step_scan(fast, with_active=False),
        "finite rewards, active mask": stream.step_scan(fast, with_active=True),
    }


def stream_of(num_envs):
    """Each scan's arguments: the rewards and ends, and the ``active`` masks where it takes them."""
    rewards, terminated = (jnp.asarray(a) for a in stream.make_stream(STEPS, num_envs))
    masked = (rewards, terminated, stream.next_step_active(terminated))
    return {name: masked if "active mask" in name else masked[:2] for name in scans()}


def kernels(num_envs):
    inputs = stream_of(num_envs)
    return {name: loop_kernels(scan, *inputs[name]) for name, scan in scans().items()}


@pytest.mark.parametrize("num_envs", [64, 1024, 4096])
def test_the_step_launches_no_more_kernels_than_the_naive_step(num_envs):
    counts = kernels(num_envs)
    assert counts["naive"] > 0, counts
    for name in scans():
        assert 0 < counts[name] <= counts["naive"], counts
    assert counts["default"] <= counts["default, active mask"], counts


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's inline threshold")
@pytest.mark.parametrize("num_envs", [64, 1024])
def test_the_default_step_runs_inline_on_cpu(num_envs):
    # Relies on XLA:CPU compiling the statistics merge (a one-trip while loop
    # over a few scalars) into a single kernel, and fusing the product of the
    # mask's weights with the terms into the loop that computes them: if a
    # compiler update splits either again, this fails. (At N = 4096 the sums
    # take two products and the step 9 kernels, the rsqrt of the variance its
    # own: 0.77x the naive step's time on jaxlib 0.12.0.1, benchmarks/RESULTS.md.)
    counts = kernels(num_envs)
    for name in ("default", "default, active mask"):
        assert counts[name] <= INLINE_KERNELS, counts


def stacks_sliced_inputs(computation: list[str]) -> bool:
    """Whether a concatenation in a fused computation reads a dynamic slice, directly or not."""
    operands, opcodes = {}, {}
    for line in computation:
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = \S+ ([\w\-]+)\((.*)", line)
        if match:
            name, opcodes[name], rest = match.groups()
            operands[name] = re.findall(r"%([\w.\-]+)", rest.split("), ")[0])

    def reads_slice(name, seen):
        if name in seen or name not in opcodes:
            return False
        seen.add(name)
        return opcodes[name] == "dynamic-slice" or any(
            reads_slice(operand, seen) for operand in operands[name]
        )

    return any(
        opcode == "concatenate" and reads_slice(name, set()) for name, opcode in opcodes.items()
    )


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's code generation")
@pytest.mark.parametrize("num_envs", [64, 1024, 4096])
def test_no_kernel_stacks_terms_it_computes_from_the_scan_inputs(num_envs):
    # XLA:CPU generates slow code for a concatenation that slices a scan's
    # inputs itself: stacking the masked terms that way ran the step at
    # 2.5-3.2x the naive step's time at N = 1024 and 4096. The mask must stay
    # out of the stacked terms (summation.cpu_sums).
    inputs = stream_of(num_envs)
    for name, scan in scans().items():
        for kernel, body in loop_body(scan, *inputs[name]).items():
            assert not stacks_sliced_inputs(body), (name, kernel, "\n".join(body))
