r"""A Brax policy as one pure function of the raw observation, its normalizer inside.

Brax's trainers return ``(make_policy, params, metrics)``: ``params[0]`` holds
the observation statistics and ``make_policy(params)(obs, key)`` normalizes
with them inside the policy network (``preprocess_observations_fn=
running_statistics.normalize``, their ``normalize_observations=True``).
:func:`policy_function` takes both and gives the policy as one function whose
normalization is the library's ``"brax"`` preset holding ``params[0]``:

.. math::

   \tilde x = \frac{x - \mu}{\sigma}, \qquad
   \sigma = \operatorname{clip}\!\left(\sqrt{M / n + \epsilon},\ \sigma_{min},\ \sigma_{max}\right),
   \qquad a = \pi_\theta(\tilde x)

The network's own normalization is handed mean 0 and std 1, under which
:math:`(\tilde x - 0) / 1 = \tilde x` exactly. The statistics are constants of
the function: ``jax.export`` carries them with the weights.
:func:`with_normalizer` goes the other way, a library-trained normalizer into
the ``params`` that Brax's ``make_policy`` takes.
"""

import flax
import jax
import jax.numpy as jnp
from brax.training.acme import running_statistics

from rewardnorm_jax._src.core import checks
from rewardnorm_jax.brax import _running_statistics


def policy_function(make_policy, params, *, deterministic=True, std_min=1e-6, std_max=1e6):
    """Brax's policy with its observation normalizer inside, as one pure function.

    Args:
      make_policy: Brax's inference-function maker: the first value returned by
        ``ppo.train`` and ``sac.train``, or ``ppo_networks.make_inference_fn(networks)``
        (``sac_networks`` likewise) for networks built with
        ``preprocess_observations_fn=running_statistics.normalize``. A network
        built without it (``normalize_observations=False``) never normalized, and
        its policy is ``make_policy(params)`` itself.
      params: Brax's parameters, ``(normalizer_params, policy_params, ...)`` as
        its trainers return them (PPO adds the value parameters).
      deterministic: the mode of the action distribution (Brax's
        ``deterministic=True``), else a sample; a bool.
      std_min: the ``std_min_value`` Brax's updates of ``params[0]`` used
        (its default 1e-6), as for :func:`~rewardnorm_jax.brax.from_running_statistics`.
      std_max: the ``std_max_value`` they used (its default 1e6).

    Returns:
      ``act(observations) -> actions`` if ``deterministic``, else
      ``act(observations, key) -> actions``: pure, jit-able and exportable with
      ``jax.export`` (a symbolic batch too), equal to
      ``make_policy(params, deterministic)(observations, key)[0]`` up to float
      rounding.

    Raises:
      TypeError: for ``params`` without Brax's statistics first, or a
        ``deterministic`` that is not a bool.
      ValueError: for statistics whose observation shape the policy's
        parameters do not take (``act`` itself refuses observations of another
        shape, naming ``observations``), or whose ``std`` is not the one
        ``std_min`` and ``std_max`` give.

    Example:
      >>> from brax.training.agents.ppo import networks as ppo_networks
      >>> nets = ppo_networks.make_ppo_networks(
      ...     3, 1, preprocess_observations_fn=running_statistics.normalize,
      ...     policy_hidden_layer_sizes=(4,), value_hidden_layer_sizes=(4,))
      >>> key = jax.random.PRNGKey(0)
      >>> params = (running_statistics.init_state(jnp.zeros(3)),
      ...           nets.policy_network.init(key), nets.value_network.init(key))
      >>> act = policy_function(ppo_networks.make_inference_fn(nets), params)
      >>> act(jnp.ones((2, 3))).shape
      (2, 1)
    """
    deterministic = checks.check_bool("deterministic", deterministic)
    _check_params(params)
    norm, state = _running_statistics.from_running_statistics(
        params[0], std_min=std_min, std_max=std_max
    )
    brax_policy = make_policy((_identity(params[0]), *params[1:]), deterministic=deterministic)

    def sample(observations, key):
        return brax_policy(norm.apply(state, observations), key)[0]

    _check_shapes(sample, params[0])
    if not deterministic:
        return sample

    def act(observations):
        return sample(observations, None)  # the mode draws nothing

    return act


def with_normalizer(params, config, state):
    """Brax's ``params`` with the library's statistics in place of ``params[0]``.

    Brax's ``make_policy`` then normalizes with them:
    ``make_policy(with_normalizer(params, norm.config, state))(obs, key)`` acts
    on ``norm.apply(state, obs)`` up to float rounding (Brax keeps the mean in one
    word, the library in two).

    Args:
      params: Brax's parameters, ``(normalizer_params, policy_params, ...)``;
        ``params[0]`` gives the observation shapes the policy takes.
      config: the normalizer's configuration (``norm.config``), without a
        prior (the ``"brax"`` preset, or ``"brax_ema"`` for ``params[0]`` in
        ``mode='ema'``), as for :func:`to_running_statistics`.
      state: its state, of the observation shapes of ``params[0]``.

    Returns:
      ``(to_running_statistics(config, state), *params[1:])``.

    Raises:
      TypeError: for ``params`` without Brax's statistics first.
      ValueError: for a ``state`` of other observation shapes than ``params[0]``,
        or a ``config`` giving another mode than ``params[0]``'s (Brax's
        trainers continue in the mode of the statistics they are given).

    Example:
      >>> import rewardnorm_jax as rn
      >>> norm = rn.normalize_observation("brax")
      >>> state = norm.update(norm.init(jnp.zeros(3)), jnp.arange(12.0).reshape(4, 3))
      >>> params = (running_statistics.init_state(jnp.zeros(3)), {})
      >>> int(with_normalizer(params, norm.config, state)[0].count)
      4
    """
    _check_params(params)
    brax_state = _running_statistics.to_running_statistics(config, state)
    found, expected = _feature_shapes(brax_state.mean), _feature_shapes(params[0].mean)
    if found != expected:
        raise ValueError(
            f"state holds observations of shape {found}, params[0] of shape {expected}: "
            "pass the statistics of the observations this policy takes."
        )
    if brax_state.mode != params[0].mode:
        found, expected = (_MODES[m] for m in (brax_state.mode, params[0].mode))
        raise ValueError(
            f"config (preset {config.preset!r}) gives statistics in mode={found!r}, params[0] is "
            f"in mode={expected!r}: build the normalizer with the "
            f"{'brax_ema' if expected == 'ema' else 'brax'!r} preset."
        )
    return (brax_state, *params[1:])


_MODES = {
    running_statistics.NormalizationMode.WELFORD: "welford",
    running_statistics.NormalizationMode.EMA: "ema",
}


def _check_params(params) -> None:
    """Refuses ``params`` that do not start with Brax's observation statistics."""
    if not isinstance(params, tuple | list) or not params:
        raise TypeError(
            "params should be Brax's parameters, (normalizer_params, policy_params, ...), "
            f"got {type(params).__name__}."
        )
    if not isinstance(params[0], running_statistics.RunningStatisticsState):
        raise TypeError(
            "params[0] should be Brax's observation statistics (a RunningStatisticsState, "
            f"the first of the parameters its trainers return), got {type(params[0]).__name__}."
        )


def _identity(brax_state):
    """Brax's statistics with mean 0 and std 1: its ``normalize`` then returns its input."""
    return brax_state.replace(
        mean=jax.tree.map(jnp.zeros_like, brax_state.mean),
        std=jax.tree.map(jnp.ones_like, brax_state.std),
    )


def _feature_shapes(tree):
    """``tree``'s leaf shapes, in its structure."""
    return jax.tree.map(jnp.shape, tree)


def _check_shapes(sample, brax_state) -> None:
    """Traces ``sample`` on one observation of the statistics' shapes (no compilation)."""
    probe = jax.tree.map(lambda m: jax.ShapeDtypeStruct((1, *m.shape), m.dtype), brax_state.mean)
    try:
        jax.eval_shape(sample, probe, jax.random.PRNGKey(0))
    except (TypeError, ValueError, flax.errors.FlaxError) as error:
        raise ValueError(
            f"params[0] holds observations of shape {_feature_shapes(brax_state.mean)}, which "
            f"the policy's parameters (params[1]) do not take: {error}"
        ) from error
