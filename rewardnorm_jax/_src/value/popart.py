r"""PopArt: value targets normalized by adaptive statistics, outputs preserved.

A critic trained on raw returns must fit whatever scale they have, and that
scale may span orders of magnitude across tasks and over training. PopArt
(van Hasselt et al. 2016; Hessel et al. 2019 per task) leaves the rewards
alone and normalizes the *targets* of the value head instead:

* **ART** (adaptively rescaling targets): running statistics of the targets
  give a shift :math:`\mu` and a scale :math:`\sigma`, and the head regresses
  :math:`(y - \mu) / \sigma`;
* **POP** (preserving outputs precisely): each time the statistics move, the
  head's last linear layer :math:`f(h) = W h + b` is rescaled so that its
  unnormalized output :math:`\sigma f(h) + \mu` is unchanged:

  .. math::
    W' = W \frac{\sigma}{\sigma'}, \qquad
    b' = \frac{\sigma b + \mu - \mu'}{\sigma'}

The statistics are the library's :class:`~rewardnorm_jax.RunningStats`,
merged by :func:`~rewardnorm_jax.merge_stats` (per task by the keyed merge),
so they sum across ``vmap`` axes, devices and processes as every other
transform's do. With ``step_size`` :math:`\alpha` every target weighs
:math:`\alpha` (rlax's recurrence, :math:`\mu' = \mu + \alpha \sum_i (y_i -
\mu)` and likewise for the second moment :math:`\nu`); with
``step_size=None`` every target seen weighs the same, counted exactly.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar

import jax
import jax.numpy as jnp
from flax import struct

from rewardnorm_jax._src.core import base, checks
from rewardnorm_jax._src.stats import running as rs


class PopArtState(struct.PyTreeNode):
    """State of :func:`popart`: statistics of the value targets, and the scale's bounds.

    ``shift``, ``scale`` and ``second_moment`` are rlax's ``PopArtState``
    fields, read from the statistics.
    """

    stats: rs.RunningStats  # () shared, or (num_tasks,): one set per task
    scale_lb: float = struct.field(pytree_node=False, default=1e-5)  # static
    scale_ub: float = struct.field(pytree_node=False, default=1e5)  # static

    @property
    def shift(self) -> jax.Array:
        r"""The targets' running mean :math:`\mu`."""
        return self.stats.mean + self.stats.mean_low

    @property
    def scale(self) -> jax.Array:
        r"""The targets' running standard deviation, bounded: :math:`\sigma \in [lb, ub]`."""
        # Clipped after the square root: lb**2 may be subnormal (flushed to 0), ub**2 inf.
        return jnp.clip(jnp.sqrt(self.stats.var), self.scale_lb, self.scale_ub)

    @property
    def second_moment(self) -> jax.Array:
        r"""The targets' running second moment :math:`\nu = \sigma^2 + \mu^2` (unbounded)."""
        return self.stats.var + self.shift**2


Layer = TypeVar("Layer")  # a Dense layer's parameters: a mapping with kernel and bias


class PopArtUpdateFn(Protocol):
    """Signature of :attr:`PopArt.update`."""

    def __call__(
        self,
        state: PopArtState,
        targets: jax.typing.ArrayLike,
        task: jax.typing.ArrayLike | None = None,
        *,
        mask: jax.typing.ArrayLike | None = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> PopArtState:
        """The state with a batch of value targets learnt."""
        ...


class PopArtMapFn(Protocol):
    """Signature of :attr:`PopArt.normalize` and :attr:`PopArt.unnormalize`."""

    def __call__(
        self,
        state: PopArtState,
        values: jax.typing.ArrayLike,
        task: jax.typing.ArrayLike | None = None,
    ) -> jax.Array:
        """``values`` mapped by each one's task's shift and scale."""
        ...


class PopArtStepFn(Protocol):
    """Signature of :attr:`PopArt.step`."""

    def __call__(
        self,
        layer: Layer,
        state: PopArtState,
        targets: jax.typing.ArrayLike,
        task: jax.typing.ArrayLike | None = None,
        *,
        mask: jax.typing.ArrayLike | None = None,
        update_stats: jax.typing.ArrayLike = True,
    ) -> tuple[Layer, PopArtState]:
        """``update``, then :func:`preserve_outputs`: the rescaled layer and the new state."""
        ...


class PopArt(NamedTuple):
    r"""PopArt as a named set of pure functions over a :class:`PopArtState`.

    Attributes:
      init: ``init() -> state``: the statistics of the prior (shift 0, scale 1).
      update: ``update(state, targets, task=None, *, mask=None,
        update_stats=True) -> state``: learn a batch of value targets (ART).
      normalize: ``normalize(state, values, task=None)``: :math:`(y - \mu) / \sigma`,
        the regression target of the value head.
      unnormalize: ``unnormalize(state, values, task=None)``: :math:`\sigma v + \mu`,
        the value in the rewards' units.
      step: ``step(layer, state, targets, task=None, *, mask=None,
        update_stats=True) -> (layer, state)``: ``update``, then
        :func:`preserve_outputs` of the value head's last layer (rlax's
        ``popart_update``).
      config: the :class:`PopArtConfig`, the metadata for
        :func:`~rewardnorm_jax.save_state` / :func:`~rewardnorm_jax.load_state`.
    """

    init: Callable[[], PopArtState]
    update: PopArtUpdateFn
    normalize: PopArtMapFn
    unnormalize: PopArtMapFn
    step: PopArtStepFn
    config: "PopArtConfig"


@dataclasses.dataclass(frozen=True)
class PopArtConfig(base.Config):
    """The options of :func:`popart`, checked when it is built."""

    name: ClassVar[str] = "popart"
    step_size: float | None = None
    scale_lb: float = 1e-5
    scale_ub: float = 1e5
    num_tasks: int | None = None
    axis_name: Any = dataclasses.field(default=None, metadata={"checkpoint": False})
    dtype: Any = None

    def __post_init__(self):
        dtype = rs.check_dtype(self.dtype)
        # A bound of 0 divides by zero on constant targets; ub < lb is an empty range.
        scale_lb = checks.check_positive("scale_lb", self.scale_lb, dtype)
        scale_ub = checks.check_positive("scale_ub", self.scale_ub, dtype, allow_inf=True)
        if scale_ub < scale_lb:
            raise ValueError(
                f"scale_ub should be >= scale_lb, got scale_lb={scale_lb!r}, scale_ub={scale_ub!r}."
            )
        options = {
            "step_size": rs.check_step_size(self.step_size, dtype),
            "scale_lb": scale_lb,
            "scale_ub": scale_ub,
            "num_tasks": checks.check_num_tasks(self.num_tasks),
            "axis_name": rs.check_axis_name(self.axis_name),
            "dtype": dtype,
        }
        for field, value in options.items():
            object.__setattr__(self, field, value)


def init(config: PopArtConfig) -> PopArtState:
    """The statistics of the prior: shift 0, scale 1."""
    shape = () if config.num_tasks is None else (config.num_tasks,)
    return PopArtState(
        stats=rs.init_stats(shape, config.dtype, step_size=config.step_size),
        scale_lb=config.scale_lb,
        scale_ub=config.scale_ub,
    )


def checked(config: PopArtConfig, state, name: str, values, task, *, broadcast=False):
    """``(values, task)`` checked against the state and the configuration, as arrays."""
    checks.check_state(state, checks.expected_layout(init, config), (), config)
    values = jnp.asarray(checks.check_reward(name, values), config.dtype)
    if config.num_tasks is None:
        if task is not None:
            raise ValueError(
                "task is given but this popart has one set of statistics "
                "(num_tasks=None): build it with popart(num_tasks=K)."
            )
        return values, None
    if task is None:
        raise ValueError(f"popart(num_tasks={config.num_tasks}) needs each target's task.")
    shape = jnp.shape(values)
    return values, checks.check_task(task, shape, config.num_tasks, "target", broadcast=broadcast)


def update(config: PopArtConfig, state, targets, task=None, *, mask=None, update_stats=True):
    """The statistics with the finite, masked-in targets learnt (ART)."""
    targets, task = checked(config, state, "targets", targets, task)
    mask = checked_mask(mask, targets.shape, update_stats) & jnp.isfinite(targets)
    if task is None:
        batch, mask = targets.reshape(-1), mask.reshape(-1)
        stats = rs.merge_checked(state.stats, batch, mask, axis_name=config.axis_name)
    else:
        stats = rs.merge_keyed(state.stats, targets, mask, task, axis_name=config.axis_name)
    return state.replace(stats=jax.lax.stop_gradient(stats))


def _per_target(values, task):
    """Each target's task's values (NaN for a bad id), without a gradient to the state."""
    return rs.per_key(jax.lax.stop_gradient(values), task)


def normalize(config: PopArtConfig, state, values, task=None) -> jax.Array:
    r""":math:`(y - \mu) / \sigma`, each value by its task's statistics.

    :math:`\mu` is subtracted as its two words, ``(y - mean) - mean_low``: the
    rounded ``mean + mean_low`` would cost half an ulp of the mean, which is
    many standard deviations' worth where the targets' mean dwarfs their spread.
    """
    values, task = checked(config, state, "values", values, task, broadcast=True)
    centred = (values - _per_target(state.stats.mean, task)) - _per_target(
        state.stats.mean_low, task
    )
    return centred / _per_target(state.scale, task)


def unnormalize(config: PopArtConfig, state, values, task=None) -> jax.Array:
    r""":math:`\sigma v + \mu`, each value by its task's statistics."""
    values, task = checked(config, state, "values", values, task, broadcast=True)
    return values * _per_target(state.scale, task) + _per_target(state.shift, task)


def step(config: PopArtConfig, layer, state, targets, task=None, *, mask=None, update_stats=True):
    """``update``, then :func:`preserve_outputs` of the value head's last layer."""
    new_state = update(config, state, targets, task, mask=mask, update_stats=update_stats)
    return preserve_outputs(layer, state, new_state), new_state


def popart(
    step_size: base.Real | None,
    *,
    scale_lb: base.Real = 1e-5,
    scale_ub: base.Real = 1e5,
    num_tasks: int | None = None,
    axis_name=None,
    dtype=None,
) -> PopArt:
    r"""PopArt normalization of value targets, with output-preserving rescaling.

    The statistics of the targets give the shift :math:`\mu` (their mean) and
    the scale :math:`\sigma = \operatorname{clip}(\text{std}, lb, ub)`. With a
    step size :math:`\alpha` each update is rlax's ``art``, targets of one
    task summed:

    .. math::
      \mu' = \mu + \alpha \sum_i (y_i - \mu), \qquad
      \nu' = \nu + \alpha \sum_i (y_i^2 - \nu), \qquad
      \sigma' = \sqrt{\operatorname{clip}(\nu' - \mu'^2, lb^2, ub^2)}

    from :math:`\mu = 0, \nu = 1`; ``step_size=None`` keeps cumulative
    statistics instead (every target weighs the same, with the exact count of
    :func:`~rewardnorm_jax.init_stats`). The variance is kept as a sum of
    squared deviations, not as :math:`\nu - \mu^2`: with targets of mean
    :math:`10^4` and spread 1 the float32 scale stays within :math:`10^{-4}`
    (the running mean's rounding), where :math:`\nu - \mu^2` loses every
    digit. With a step size its
    range is then :math:`\alpha` times the dtype's (float32: a spread up to
    about :math:`\sqrt{\alpha}\, 10^{19}`; past it the scale saturates at
    ``scale_ub``, never NaN).

    Non-finite targets (NaN, inf) are left out of the statistics, as
    :func:`~rewardnorm_jax.normalize_reward` leaves non-finite rewards out;
    check targets upstream to fail fast instead.

    Where it goes in a loss (the value head outputs normalized values ``v``)::

      value_loss = jnp.square(v - popart.normalize(state, targets, task)).mean()

    with ``targets`` computed in the rewards' units, from
    ``popart.unnormalize(state, v, task)`` (PPO's GAE, a Q-learning
    bootstrap). Before the loss, ``params[head], state = popart.step(params[head],
    state, targets, task)``.

    Args:
      step_size: :math:`\alpha \in (0, 1]`, each target's weight (rlax's
        ``step_size``; its example uses 3e-3 with one target per update), or
        ``None`` for cumulative statistics. A batch takes the share
        :math:`n_b \alpha` of the statistics, which must be at most 1:
        ``step_size`` times the targets per update (over every participant of
        ``axis_name``) may not exceed 1, so scale it with the batch (PPO with
        2048 targets per update: ``step_size`` at most 1/2048).
      scale_lb: lower bound of the scale, > 0 (rlax's ``scale_lb``).
      scale_ub: upper bound of the scale, >= ``scale_lb`` (``inf`` for none).
      num_tasks: ``None`` for one set of statistics, or the number :math:`K`
        of tasks: one set per task (rlax's ``indices``; a value head with one
        output per task), each target merged into its task's set.
      axis_name: mapped axis name(s) to merge the targets across
        (``vmap``/``pmap``/``shard_map``), as :func:`~rewardnorm_jax.merge_stats`.
      dtype: statistics dtype, float32 or float64; default float64 under x64,
        float32 otherwise.

    Returns:
      A :class:`PopArt`.

    Raises:
      ValueError: for a step size outside (0, 1], bounds that are not
        positive or not ordered, ``num_tasks`` < 1; from ``update`` and
        ``step``, for targets, tasks or masks whose shapes disagree, a state
        of other hyperparameters, more targets per update than
        ``1 / step_size``, or (outside ``jit``) a task id outside
        :math:`[0, K)`. Inside ``jit`` that is a ``checkify`` error where the
        caller runs under ``jax.experimental.checkify.checkify``; without it
        such a target joins no statistics and normalizes to NaN.
      TypeError: for targets that are not real numbers, tasks that are not
        integers, or a mask that is not numbers.

    Example:
      >>> pa = popart(step_size=0.1)
      >>> state = pa.update(pa.init(), jnp.array([10.0, 12.0]))
      >>> round(float(state.shift), 3), round(float(state.scale), 3)
      (2.2, 4.512)
      >>> round(float(pa.normalize(state, 12.0)), 3)
      2.172

    References:
      van Hasselt et al., `Learning values across many orders of magnitude
      <https://arxiv.org/abs/1602.07714>`_, 2016; Hessel et al.,
      `Multi-task Deep Reinforcement Learning with PopArt
      <https://arxiv.org/abs/1809.04474>`_, 2019; rlax ``rlax/_src/pop_art.py``.
    """
    config = PopArtConfig.checked(step_size, scale_lb, scale_ub, num_tasks, axis_name, dtype)
    return PopArt(
        functools.partial(init, config),
        functools.partial(update, config),
        functools.partial(normalize, config),
        functools.partial(unnormalize, config),
        functools.partial(step, config),
        config,
    )


def checked_mask(mask, shape, update_stats):
    """The mask of targets to learn, ``update_stats`` folded in."""
    checks.check_update_stats(update_stats)
    if mask is not None:
        mask = jnp.asarray(checks.check_flag("mask", mask), bool)
        if mask.shape != shape:
            raise ValueError(f"mask has shape {mask.shape}; expected {shape}, the targets' shape.")
    selected = jnp.asarray(update_stats, bool)
    return selected if mask is None else mask & selected


def _check_layer(layer, stats_shape) -> None:
    """Raises unless the layer's parameters are real and its outputs fit the statistics."""
    arrays = {name: jax.tree.leaves(layer[name]) for name in ("kernel", "bias")}
    for name, leaves in arrays.items():
        if len(leaves) != 1:
            raise ValueError(
                f"layer[{name!r}] should be one array (or an NNX Param holding one), got "
                f"{type(layer[name]).__name__} with {len(leaves)} arrays."
            )
    (kernel,), (bias,) = arrays.values()
    for name, value in (("kernel", kernel), ("bias", bias)):
        if not jnp.issubdtype(value.dtype, jnp.floating):
            raise TypeError(
                f"layer[{name!r}] has dtype {value.dtype}; rescaling needs floating parameters."
            )
    outputs = kernel.shape[-1:] if kernel.ndim else ()
    if stats_shape and not (outputs == stats_shape and bias.shape == stats_shape):
        raise ValueError(
            f"layer has kernel {kernel.shape} and bias {bias.shape}; with num_tasks="
            f"{stats_shape[0]} its outputs must be the tasks: kernel (inputs, {stats_shape[0]}) "
            f"and bias ({stats_shape[0]},)."
        )


def preserve_outputs(layer: Layer, old: PopArtState, new: PopArtState) -> Layer:
    r"""The value head's last layer rescaled so its unnormalized outputs stay the same (POP).

    .. math::
      W' = W \frac{\sigma}{\sigma'}, \qquad
      b' = \frac{\sigma b + \mu - \mu'}{\sigma'}

    so that :math:`\sigma' (W' h + b') + \mu' = \sigma (W h + b) + \mu` for
    every input :math:`h`. Output :math:`k` of the layer uses task
    :math:`k`'s statistics (``num_tasks`` outputs), or all share the one set.

    Args:
      layer: the parameters of a Flax ``Dense``: a mapping with ``kernel``
        of shape ``(inputs, outputs)`` and ``bias`` of shape ``(outputs,)``.
        A linen params dict (``params["params"]["value_head"]``, dict or
        ``FrozenDict``) or an NNX state (``nnx.state(model.value_head,
        nnx.Param)``, then ``nnx.update(model.value_head, result)``).
      old: the PopArt state the layer's parameters were trained under.
      new: the PopArt state after ``update``.

    Returns:
      A mapping of the same type with ``kernel`` and ``bias`` replaced.

    Raises:
      ValueError: for a layer without ``kernel`` and ``bias`` (a ``Dense``
        without a bias cannot absorb the shift), states of other shapes, or a
        layer whose outputs are not the ``num_tasks`` tasks of the statistics.
      TypeError: for parameters that are not floating point, or states that
        are not :class:`PopArtState`.

    Example:
      >>> pa = popart(step_size=0.1)
      >>> old = pa.init()
      >>> new = pa.update(old, jnp.array([10.0, 12.0]))
      >>> layer = {"kernel": jnp.ones((2, 1)), "bias": jnp.zeros(1)}
      >>> h = jnp.array([1.0, 2.0])
      >>> before = pa.unnormalize(old, h @ layer["kernel"] + layer["bias"])
      >>> layer = preserve_outputs(layer, old, new)
      >>> after = pa.unnormalize(new, h @ layer["kernel"] + layer["bias"])
      >>> bool(jnp.allclose(before, after))
      True
    """
    if not (isinstance(layer, Mapping) and "kernel" in layer and "bias" in layer):
        found = sorted(layer) if isinstance(layer, Mapping) else type(layer).__name__
        raise ValueError(
            "layer should be a Dense layer's parameters, a mapping with 'kernel' and 'bias' "
            f"(use_bias=True: the bias absorbs the shift), got {found}."
        )
    for state, name in ((old, "old"), (new, "new")):
        if not isinstance(state, PopArtState):
            raise TypeError(f"{name} should be a PopArtState, got {type(state).__name__}.")
    if old.stats.mean.shape != new.stats.mean.shape:
        raise ValueError(
            f"old and new PopArt states have statistics of shapes {old.stats.mean.shape} and "
            f"{new.stats.mean.shape}: pass the states before and after one update."
        )
    _check_layer(layer, old.stats.mean.shape)
    ratio = old.scale / new.scale
    # mu - mu' word by word: the rounded shifts would differ by an ulp of the mean.
    offset = ((old.stats.mean - new.stats.mean) + (old.stats.mean_low - new.stats.mean_low)) / (
        new.scale
    )

    def kernel(w):
        return w * ratio.astype(w.dtype)

    def bias(b):
        return b * ratio.astype(b.dtype) + offset.astype(b.dtype)

    # tree.map reaches the array inside an NNX Param as well as a plain array.
    replaced = {
        **layer,
        "kernel": jax.tree.map(kernel, layer["kernel"]),
        "bias": jax.tree.map(bias, layer["bias"]),
    }
    kind: Any = type(layer)
    rebuilt: Any = replaced if kind is dict else kind(replaced)
    return rebuilt
