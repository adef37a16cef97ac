r"""Brax's observation statistics (``RunningStatisticsState``) to and from the library's.

Brax's trainers normalize observations themselves and return the statistics
they learned as the first of their parameters (``params[0]`` of ``ppo.train``
and ``sac.train``). :func:`from_running_statistics` hands them to the library
(for evaluation, freezing, checkpoints and export beside the policy);
:func:`to_running_statistics` gives them back, so that Brax continues
updating from them.

Both run on the host, outside ``jit`` (they read the count and ``std_eps`` as
numbers), as a trainer's parameters are handed over. Both keep:

* the count exactly (Brax's ``UInt64`` words are the library's count words);
* the mode: a ``mode='welford'`` state is the ``"brax"`` preset's, a
  ``mode='ema'`` state the ``"brax_ema"`` preset's, and each goes back in its
  mode. Brax's trainers honour their ``normalize_until_count`` in ``'ema'``
  mode alone, so a state frozen by it stays frozen when given back (its count
  goes on growing there, and is read as it is: the library and Brax then
  continue alike);
* ``std_eps``, as the normalizer's ``epsilon`` (rounded to the statistics'
  dtype, as Brax adds it);
* the mean, and the summed variance :math:`M` (Welford mode) or the variance
  :math:`M / n` (``'ema'`` mode, whose :math:`M` the library holds in two
  words: :math:`M / n` reads back as the same variance).

What Brax's state cannot hold is refused: a prior, statistics per environment
or per task, an ``epsilon`` on the standard deviation (Brax's ``std_eps`` is
under the square root), an ``until_count`` (Brax's is an argument of its
trainer, with another rule: an update is skipped when it would take the count
past it, and the count still grows), and features that counted different
samples (the library counts per feature, non-finite observations left out;
Brax one count for every leaf).
"""

import jax
import jax.numpy as jnp
import numpy as np
from brax.training import types as brax_types
from brax.training.acme import running_statistics

from rewardnorm_jax._src import observation
from rewardnorm_jax._src.core import checks
from rewardnorm_jax._src.stats import running as rs


def from_running_statistics(
    brax_state: running_statistics.RunningStatisticsState,
    *,
    clip=None,
    std_min=1e-6,
    std_max=1e6,
) -> tuple[observation.ObservationNormalizer, observation.ObservationNormState]:
    """The library's normalizer and state holding Brax's statistics.

    Args:
      brax_state: Brax's statistics (``params[0]`` of its trainers), with a
        ``UInt64`` count (Brax >= 0.14) or a float count (earlier versions,
        converted exactly up to :math:`2^{24}` in float32).
      clip: Brax's ``max_abs_value`` of ``normalize``, or ``None``.
      std_min: the ``std_min_value`` its updates used (Brax's default 1e-6).
      std_max: the ``std_max_value`` its updates used (Brax's default 1e6).

    Returns:
      ``(normalizer, state)``: ``normalize_observation("brax", epsilon=std_eps,
      ...)`` in the statistics' dtype (``"brax_ema"`` for a ``mode='ema'``
      state), and its state.

    Example:
      >>> from brax.training.acme import running_statistics
      >>> brax_state = running_statistics.init_state(jnp.zeros(3))
      >>> norm, state = from_running_statistics(brax_state)
      >>> norm.config.preset
      'brax'
    """
    if not isinstance(brax_state, running_statistics.RunningStatisticsState):
        raise TypeError(
            "brax_state should be a brax.training.acme.running_statistics."
            f"RunningStatisticsState, got {type(brax_state).__name__}."
        )
    if np.ndim(brax_state.std_eps) != 0:
        raise ValueError(
            f"brax_state.std_eps has shape {np.shape(brax_state.std_eps)}: a state replicated "
            "over devices (pmap) holds one per device; pass one replica's, "
            "jax.tree.map(lambda x: x[0], brax_state)."
        )
    _check_moments(brax_state)
    means = jax.tree.leaves(brax_state.mean)
    dtype = jnp.result_type(means[0]) if means else rs.default_dtype()
    ema = brax_state.mode == running_statistics.NormalizationMode.EMA
    norm = observation.normalize_observation(
        "brax_ema" if ema else "brax",
        epsilon=float(brax_state.std_eps),
        clip=clip,
        std_min=std_min,
        std_max=std_max,
        dtype=dtype,
    )
    hi, lo = _count_words(brax_state.count)
    count = float(hi) * 2.0**32 + float(lo)

    def stats_of(mean, summed_variance):
        mean = jnp.asarray(mean, dtype)
        # Brax clamps a negative variance at 0 too.
        summed = np.maximum(np.asarray(summed_variance, np.float64), 0.0)
        m2, m2_low = _two_product(summed, count) if ema else (summed, np.zeros_like(summed))
        m2_high = m2.astype(dtype)
        return rs.RunningStats.from_parts(
            mean=mean,
            mean_low=jnp.zeros_like(mean),
            m2=m2_high,
            m2_low=np.where(np.isinf(m2_high), 0.0, (m2 - m2_high) + m2_low).astype(dtype),
            count_hi=jnp.broadcast_to(hi, mean.shape),
            count_lo=jnp.broadcast_to(lo, mean.shape),
            prior_count=0.0,
        )

    stats = jax.tree.map(stats_of, brax_state.mean, brax_state.summed_variance)
    state = observation.ObservationNormState(stats)
    _check_std(norm, state, brax_state)
    return norm, state


def _check_moments(brax_state) -> None:
    """Refuses a NaN or infinite mean and a NaN summed variance, which no update makes."""
    for field, bad, expected in (
        ("mean", lambda x: ~np.isfinite(x), "a finite mean"),
        ("summed_variance", np.isnan, "a summed variance that is not NaN"),
    ):
        leaves = jax.tree_util.tree_leaves_with_path(getattr(brax_state, field))
        for path, leaf in leaves:
            name = f"brax_state.{field}{jax.tree_util.keystr(path)}"
            checks.refuse_where(name, leaf, bad(np.asarray(leaf)), expected)


def _check_std(norm, state, brax_state) -> None:
    """Refuses bounds of the standard deviation other than those Brax's updates used."""
    ours = jax.tree.map(
        lambda s: observation.std(norm.config, s),
        state.stats,
        is_leaf=lambda x: isinstance(x, rs.RunningStats),
    )
    for mine, theirs in zip(jax.tree.leaves(ours), jax.tree.leaves(brax_state.std), strict=True):
        if not np.allclose(mine, theirs, rtol=1e-4, atol=0):
            raise ValueError(
                "brax_state.std differs from the std its statistics give with "
                f"std_min={norm.config.std_min!r} and std_max={norm.config.std_max!r} (for "
                f"example {np.ravel(theirs)[:3]} against {np.ravel(mine)[:3]}): pass the "
                "std_min_value and std_max_value its updates used as std_min and std_max."
            )


def _two_product(a: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """``a * b`` in float64 as ``(product, error)``, their sum exact (Dekker's TwoProduct)."""
    product = a * b
    a_high, a_low = _halves(a)
    b_high, b_low = _halves(np.float64(b))
    error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
    return product, np.where(np.isfinite(product), error, 0.0)


def _halves(x):
    """``x`` as two float64 halves of 26 bits each (Veltkamp's split)."""
    scaled = 134217729.0 * x  # 2**27 + 1
    high = scaled - (scaled - x)
    return high, x - high


def _quotient(high, low, divisor: float) -> np.ndarray:
    """``(high + low) / divisor`` in float64, corrected once for the quotient's rounding."""
    first = high / divisor
    product, error = _two_product(first, divisor)
    return first + (((high - product) - error) + low) / divisor


def _count_words(count) -> tuple[jax.Array, jax.Array]:
    """Brax's count as two uint32 words, checked: one whole number in [0, 2**64)."""
    if isinstance(count, brax_types.UInt64):
        words = [np.asarray(count.hi), np.asarray(count.lo)]
        whole = None
        if all(w.ndim == 0 and w == np.floor(w) and 0 <= w < 2**32 for w in words):
            whole = (int(words[0]) << 32) + int(words[1])
    else:
        value = np.asarray(count)
        whole = None
        if (
            value.ndim == 0
            and np.isfinite(value)
            and 0 <= value < 2**64
            and value == np.floor(value)
        ):
            whole = int(value)
    if whole is None:
        raise ValueError(
            f"brax_state.count should be one whole number in [0, 2**64), got {count!r}; a state "
            "replicated over devices (pmap) holds one per device: pass one replica's, "
            "jax.tree.map(lambda x: x[0], brax_state)."
        )
    return jnp.uint32(whole >> 32), jnp.uint32(whole & 0xFFFFFFFF)


def to_running_statistics(
    config: observation.ObservationConfig,
    state: observation.ObservationNormState,
    *,
    std_min=None,
    std_max=None,
) -> running_statistics.RunningStatisticsState:
    """Brax's statistics holding the library's, in the mode of the preset.

    Args:
      config: the normalizer's configuration (``norm.config``); it must have
        no prior (``prior_count=0``, the ``"brax"`` and ``"brax_ema"``
        presets), as Brax has none, epsilon under the square root and no
        ``until_count``.
      state: the normalizer's state.
      std_min: the bounds of Brax's ``std``; the configuration's by default.
      std_max: as ``std_min``.

    Returns:
      A ``RunningStatisticsState`` in ``mode='ema'`` for the ``"brax_ema"``
      preset (from :func:`from_running_statistics` of such a state, or built
      so), else in ``mode='welford'``: its count words equal the library's,
      ``std_eps`` is ``config.epsilon``, the mean is ``mean + mean_low`` and
      the summed variance ``m2 + m2_low`` (Welford) or the variance
      ``(m2 + m2_low) / n`` (``'ema'``) rounded to the dtype, and ``std`` is
      what Brax's update of that mode computes.

    Raises:
      ValueError: for a configuration with a prior, statistics per
        environment or per task, ``epsilon_on="std"`` or an ``until_count``,
        or features that counted different numbers of samples.

    Example:
      >>> import rewardnorm_jax as rn
      >>> norm = rn.normalize_observation("brax_ema")
      >>> state = norm.update(norm.init(jnp.zeros(2)), jnp.array([[1.0, 2.0], [3.0, 6.0]]))
      >>> brax_state = to_running_statistics(norm.config, state)
      >>> brax_state.mode == running_statistics.NormalizationMode.EMA
      True
      >>> brax_state.summed_variance.tolist()  # the variance, in this mode
      [1.0, 4.0]
    """
    _check_convertible(config, state)
    leaves = jax.tree.leaves(state.stats, is_leaf=lambda x: isinstance(x, rs.RunningStats))
    words = np.concatenate([np.asarray(s.count_words).reshape(-1, 2) for s in leaves])
    if words.size and not (words == words[0]).all():
        raise ValueError(
            "the features counted different numbers of samples (non-finite observations are "
            "left out per feature); Brax keeps one count for every feature."
        )
    hi, lo = (words[0] if words.size else np.zeros(2, np.uint32)).tolist()
    count = brax_types.UInt64(hi=hi, lo=lo)
    count_float = jnp.float32(count.hi) * jnp.float32(2.0**32) + jnp.float32(count.lo)
    low = config.std_min if std_min is None else std_min
    high = config.std_max if std_max is None else std_max
    ema = config.preset == "brax_ema"

    def summed_variance(stats):
        if not ema:
            return stats.m2 + stats.m2_low
        high_word, low_word = (np.asarray(x, np.float64) for x in (stats.m2, stats.m2_low))
        if (hi, lo) == (0, 0):  # Brax's initial variance
            return jnp.zeros_like(stats.m2)
        return jnp.asarray(_quotient(high_word, low_word, hi * 2.0**32 + lo), stats.m2.dtype)

    def brax_std(stats, summed):
        if (hi, lo) == (0, 0):
            return jnp.ones_like(stats.mean)
        summed = jnp.maximum(summed, 0.0)
        variance = summed if ema else summed / count_float
        return jnp.clip(jnp.sqrt(variance + config.epsilon), low, high)

    def field(read, *trees):
        return jax.tree.map(
            read, state.stats, *trees, is_leaf=lambda x: isinstance(x, rs.RunningStats)
        )

    summed = field(summed_variance)
    mode = running_statistics.NormalizationMode
    return running_statistics.RunningStatisticsState(
        count=count,
        mean=field(lambda s: s.mean + s.mean_low),
        summed_variance=summed,
        std=field(brax_std, summed),
        std_eps=config.epsilon,
        mode=mode.EMA if ema else mode.WELFORD,
    )


def _check_convertible(config, state) -> None:
    """Refuses a configuration whose statistics or options Brax's state cannot hold."""
    given: tuple[object, object] = (config, state)  # callers may pass anything
    if not isinstance(given[0], observation.ObservationConfig) or not isinstance(
        given[1], observation.ObservationNormState
    ):
        raise TypeError(
            "to_running_statistics(config, state) takes a normalizer's config (norm.config) and "
            f"its state, got {type(config).__name__} and {type(state).__name__}."
        )
    if config.prior_count != 0:
        raise ValueError(
            f"to_running_statistics needs statistics without a prior (prior_count=0, the 'brax' "
            f"preset); these have prior_count={config.prior_count!r}, which Brax cannot hold."
        )
    if config.statistics.per_env or config.statistics.num_tasks is not None:
        raise ValueError(
            f"to_running_statistics needs one set of statistics shared by the batch; these "
            f"have statistics={config.statistics!r}, which Brax's single set cannot hold."
        )
    if config.epsilon_on != "variance":
        raise ValueError(
            f"to_running_statistics needs epsilon under the square root; these have "
            f"epsilon_on={config.epsilon_on!r} (epsilon={config.epsilon!r} added to the std), "
            "which Brax's std_eps cannot hold: use epsilon_on='variance'."
        )
    if config.until_count is not None:
        raise ValueError(
            f"to_running_statistics cannot keep until_count={config.until_count!r}: Brax's "
            "state holds none (its trainer's normalize_until_count skips an update that would "
            "take the count past it, in mode='ema' alone); build the normalizer without it, "
            "with the 'brax_ema' preset, and pass normalize_until_count to the trainer."
        )
