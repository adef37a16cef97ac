r"""A categorical critic on rewards 100x the scale its default support expects.

The task: policy evaluation on the 19-state random walk (Sutton and Barto,
example 6.2), each step a fair move left or right, the episode ending past
either end with a reward of -100 (left) or +100 (right), discount 0.99: true
values from -95 to +95 (solved exactly). 32 walkers in parallel, their
episodes restarting from the middle.

The critic is a table of logits over 51 atoms per state, trained by TD(0)
with two-hot targets: the target of each transition is the two-hot of
:math:`r + \gamma_t V(s')`, :math:`V` the decoded value of the next state
(``--target c51``: the next state's distribution moved to
:math:`r + \gamma_t z` and projected, ``rn.categorical_projection``), the loss
the cross-entropy, Adam 0.05, for 3,000 updates; seeds vmapped in one jitted
program per variant. Variants:

* ``fixed [-10, 10]``: FastTD3's default ``v_min`` / ``v_max``, the bounds a
  user copies when the rewards are of order 1;
* ``scale-aware``: ``rn.scaled_support(51, multiple=2.0, warmup=500)`` fed by a
  ``rn.normalize_reward(0.99, g_max=10.0)`` state that sees the same rewards
  (its running maximum of :math:`|G|`, 100 here: a bound of 200), the bound
  frozen after 500 updates;
* ``hand-typed [-150, 150]``: bounds typed by someone who knew the scale.

It prints, per variant, the mean +- std over seeds of the root mean squared
error of the decoded values against the true ones, at the end and averaged
over the last 1,000 updates.

Usage::

    python -m benchmarks.categorical_learning --markdown               # 5 seeds, two-hot
    python -m benchmarks.categorical_learning --target c51 --markdown  # the C51 projection
    python -m benchmarks.categorical_learning --seeds 2 --updates 200  # a smoke run
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rewardnorm_jax as rn
from benchmarks._timing import print_results

NUM_STATES = 19
GAMMA = 0.99
REWARD = 100.0
WALKERS = 32
ATOMS = 51


def true_values() -> np.ndarray:
    """The exact values: (I - gamma P) V = expected reward, past the ends terminal."""
    transition = np.zeros((NUM_STATES, NUM_STATES))
    reward = np.zeros(NUM_STATES)
    for s in range(NUM_STATES):
        for step in (-1, 1):
            nxt = s + step
            if 0 <= nxt < NUM_STATES:
                transition[s, nxt] += 0.5
            else:
                reward[s] += 0.5 * (REWARD if nxt >= NUM_STATES else -REWARD)
    return np.linalg.solve(np.eye(NUM_STATES) - GAMMA * transition, reward)


def walk(state, key):
    """One step of every walker: its reward, whether its episode ended, its next state."""
    nxt = state + jax.random.choice(key, jnp.array([-1, 1]), state.shape)
    done = (nxt < 0) | (nxt >= NUM_STATES)
    reward = jnp.where(nxt >= NUM_STATES, REWARD, jnp.where(nxt < 0, -REWARD, 0.0))
    return reward, done, jnp.where(done, NUM_STATES // 2, nxt), jnp.clip(nxt, 0, NUM_STATES - 1)


def make_train(variant: str, updates: int, target_kind: str):
    """A jitted function of a seed's key: the RMSE after each update."""
    returns = rn.normalize_reward(GAMMA, g_max=10.0)
    scaled = rn.scaled_support(ATOMS, multiple=2.0, warmup=500)
    bounds = {"fixed [-10, 10]": 10.0, "hand-typed [-150, 150]": 150.0}
    optimizer = optax.adam(0.05)
    values = jnp.asarray(true_values(), jnp.float32)

    def support_of(support_state):
        if variant == "scale-aware":
            return scaled.support(support_state)
        return rn.uniform_support(-bounds[variant], bounds[variant], ATOMS)

    def loss(logits, support, state, target):
        return rn.categorical_cross_entropy(logits[state], target)

    def update(carry, key):
        logits, opt_state, walkers, reward_state, support_state = carry
        reward, done, restart, nxt = walk(walkers, key)
        _, reward_state = returns.step(reward_state, reward, done, False)
        support_state = scaled.update(support_state, reward_state)
        support = support_of(support_state)
        discounts = GAMMA * (1 - done)
        if target_kind == "c51":
            next_probs = jax.nn.softmax(logits[nxt])
            target = rn.categorical_projection(
                next_probs, support, rewards=reward, discounts=discounts
            )
        else:
            bootstrapped = reward + discounts * rn.decode_logits(logits[nxt], support)
            target = rn.two_hot(bootstrapped, support)
        grads = jax.grad(loss)(logits, support, walkers, target)
        changes, opt_state = optimizer.update(grads, opt_state)
        logits = optax.apply_updates(logits, changes)
        error = jnp.sqrt(jnp.mean((rn.decode_logits(logits, support) - values) ** 2))
        return (logits, opt_state, restart, reward_state, support_state), error

    def train(key):
        logits = jnp.zeros((NUM_STATES, ATOMS))
        walkers = jnp.full(WALKERS, NUM_STATES // 2)
        carry = (logits, optimizer.init(logits), walkers, returns.init((WALKERS,)), scaled.init())
        _, errors = jax.lax.scan(update, carry, jax.random.split(key, updates))
        return errors

    return jax.jit(jax.vmap(train))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--target", choices=("two_hot", "c51"), default="two_hot")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    tail = max(args.updates // 3, 1)
    rows = []
    for variant in ("fixed [-10, 10]", "scale-aware", "hand-typed [-150, 150]"):
        start = time.perf_counter()
        errors = np.asarray(make_train(variant, args.updates, args.target)(keys))
        seconds = time.perf_counter() - start
        final, late = errors[:, -1], errors[:, -tail:].mean(axis=1)
        rows.append(
            [
                variant,
                f"{final.mean():.2f} ± {final.std():.2f}",
                f"{late.mean():.2f} ± {late.std():.2f}",
                f"{seconds:.1f}",
            ]
        )
    headers = ["support", "RMSE at the end", f"RMSE, last {tail} updates", "seconds"]
    title = (
        f"Categorical critic ({args.target} targets), random walk x{REWARD:g}, "
        f"{args.seeds} seeds, {args.updates} updates"
    )
    print_results(title, headers, rows, args.markdown, packages=("jax", "jaxlib", "optax"))


if __name__ == "__main__":
    main()
