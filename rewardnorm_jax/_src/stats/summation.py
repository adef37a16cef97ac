r"""How a batch is summed into the statistics, on each backend and at each size.

The statistics' merge (:func:`rewardnorm_jax._src.stats.running.merge_stats`)
needs three totals of a batch per statistic: with :math:`d_i = x_i - s` the
batch's deviations from its shift,

.. math::
    T = \Big(\sum_i d_i,\ \sum_i d_i^2,\ n_b\Big)

over the selected entries (:math:`n_b` their count), summed over the batch's
leading axes and across ``axis_name``. :func:`merge_sums` computes them and
hands them to the merge. How is a matter of the backend alone: the totals
are the same up to float rounding.

* :func:`plain_sums`: one sum per total, the unselected entries selected
  away (several statistics summed as wide rows, :func:`_sum_batch`). Every
  backend but XLA:CPU runs it, and the tests compare the tuned sums with it.
* :func:`cpu_sums`, on XLA:CPU, where every kernel of a ``lax.scan`` step
  is a dispatch and every pass over a large batch is memory traffic:

  - a batch of one statistic up to ``_PRODUCTS_UP_TO`` entries (unmasked:
    below ``_HALVES_FROM``) is summed by vector-matrix products of the
    mask's weights with the rows :math:`(d, d^2, 1)`, which XLA:CPU fuses
    into the loop that computes the rows: the return recurrence and the sums
    run as one kernel. Each product covers at most ``_PRODUCT_BYTES`` of
    deviations, from ``_HALVES_FROM`` entries at least two. Only a batch whose
    unselected entries are finite may be weighted (a weight of 0 times NaN
    is NaN); the mask stays out of the stacked rows, since a concatenation
    that slices a scan's inputs itself compiles to slow code;
  - a batch of 2 to ``_NARROW_UP_TO`` statistics, or of ``_WIDE_STATISTICS``
    or more (observations of few or many features), is summed by one
    ``jnp.sum`` per term, which XLA:CPU vectorizes, where it runs a variadic
    reduction as a scalar loop;
  - any other batch is summed by variadic reductions over blocks of
    ``_BLOCK`` entries, a single pass that reads each entry once (three
    ``jnp.sum`` would make three passes), then the blocks' sums added.

  And the merge of up to ``_ONE_KERNEL_STATISTICS`` statistics runs as one
  kernel (:func:`_merge_in_one_kernel`), with the partial sums of the
  products added inside it.

Measured on jaxlib 0.12.0.1, 2 x AMD EPYC, float32, one shared statistic, each
configuration against the naive step in one interleaved run (the tables in
``benchmarks/RESULTS.md``, ``python -m benchmarks.scaling``):

* products: the step in 8 kernels at N = 64 and 1024 against 16-17 with the
  plain sums; two products from 1536 entries (one product of about 2000
  entries ran slower); past 4096 entries with a mask, the variadic reduction
  ran 0.78-0.90x the naive step where the products ran 0.89-1.18x;
* the variadic reduction in blocks: 0.8-1.0x the naive step's time from
  N = 65536, where three ``jnp.sum`` ran 1.0-1.3x and the rows stacked and
  summed by one reduction 1.2-1.8x. Reduced in one block, 2^21 float32
  entries lost 3% of the variance to rounding; blocks of ``_BLOCK`` keep the
  error of the stacked sums (the 8-device, 2^24-entry test);
* the merge in one kernel: 7-8 kernels per step at N <= 4096 against 12-14
  in straight-line code;
* wide batches (jaxlib 0.9.0, 2 x Intel Xeon, the observation step with the
  ``"brax"`` preset against Brax's, ``python -m benchmarks.observation
  --dims``): one sum per term ran 1.05-1.5x Brax's time at N = 64 and
  1.08-1.14x at N = 1024 for 32, 64 and 244 features, the variadic
  reduction 1.09-2.8x and 1.31-1.36x; for 2, 4 and 8 features 1.08-1.24x
  at N = 64 and 1.13-1.29x at N = 1024 and 4096 (one run), against
  1.14-1.39x and 1.77-2.69x; at 11 and 17 features (the sizes measured
  between) the variadic reduction was the faster (at 17: 0.97 against 1.23x
  at N = 64, 0.85 against 1.08x at N = 1024). One statistic keeps the
  variadic reduction: three sums ran 1.0-1.3x the naive step from 65536.

The partial sums of the products are added inside the merge's loop: added
outside, XLA rewrites a sum of products into one product of concatenated
rows, which ran the step at 2.3x the naive step's time at N = 4096.

On a GPU (jaxlib 0.11.2, one H200, the same scripts), the plain sums are the
faster form: the step ran at 1.0-1.3x the naive step's time from N = 1 to
16M with them, and at 1.3-7x with the tuned ones, whose one-trip loop waits
on the host at every step. Three statistics per environment ran the step
at 1.5-2.9x the naive scalar step's time from N = 4096 to 4M summed as wide
rows, and at 1.6-13x summed over the narrow ``(E, 3)`` array (which was
faster at N = 65536 alone: 1.6 against 1.9).
"""

import contextlib
import contextvars
import math

import jax
import jax.numpy as jnp

_PRODUCTS_UP_TO = 4096
_WIDE_STATISTICS = 32
_NARROW_UP_TO = 8
_HALVES_FROM = 1536
_PRODUCT_BYTES = 16 * 1024
_ONE_KERNEL_STATISTICS = 16
_BLOCK = 1024
_ROW = 128
_FORMS = ("plain", "tuned")
_EVERYWHERE: contextvars.ContextVar[str | None] = contextvars.ContextVar("everywhere", default=None)


@contextlib.contextmanager
def everywhere(form: str):
    """Within it, merges traced on any backend sum by one form, to compare the two.

    ``form`` is ``"plain"`` (:func:`plain_sums`) or ``"tuned"`` (:func:`cpu_sums`
    and the merge in one kernel). It acts when a function is traced: JAX
    caches the traces of jitted functions and of ``lax.scan``, ``cond`` and
    ``while_loop`` bodies, so a function (or body) traced before keeps its
    sums. Compare functions defined anew inside.

    Example:
      >>> with everywhere("plain"):
      ...     step = jax.jit(lambda *args: transform.step(*args))  # doctest: +SKIP
    """
    if form not in _FORMS:
        raise ValueError(f"form should be one of {_FORMS}, got form={form!r}.")
    token = _EVERYWHERE.set(form)
    try:
        yield
    finally:
        _EVERYWHERE.reset(token)


def merge_sums(
    merge, stats, deviation, mask, num_batch_axes: int, *, axis_name, weighted: bool, weights=None
):
    r"""``merge(stats, T)`` with the totals ``T`` of the batch's deviations.

    Weighted totals, :math:`(\sum w d, \sum w d^2, \sum w)`, take the plain
    form on every backend (:func:`plain_sums`).

    Args:
      merge: ``merge(stats, totals) -> stats``, ``totals`` of shape ``(3, *S)``
        (:math:`\sum d`, :math:`\sum d^2`, :math:`n_b`).
      stats: the statistics, passed to ``merge``.
      deviation: ``(*B, *S)`` deviations ``d = x - shift``.
      mask: boolean of the same shape, or ``None`` to select every entry.
      num_batch_axes: ``len(B)``, the axes summed away.
      axis_name: mapped axes to sum across as well, or ``None``.
      weighted: whether the entries outside ``mask`` are finite, so that
        they may be weighted by 0 instead of selected away.
      weights: ``None``, or the entries' weights (same shape, finite, ``>= 0``,
        0 outside ``mask``).

    Returns:
      ``merge``'s statistics.
    """

    def plain(stats, deviation, mask):
        totals = plain_sums(deviation, mask, num_batch_axes, weights)
        return merge(stats, totals if axis_name is None else jax.lax.psum(totals, axis_name))

    def tuned(stats, deviation, mask):
        parts = cpu_sums(deviation, mask, num_batch_axes, weighted)
        if axis_name is not None:
            parts = jax.lax.psum(parts, axis_name)
        return _merge_in_one_kernel(merge, stats, parts)

    form = _EVERYWHERE.get()
    if weights is not None or not isinstance(math.prod(deviation.shape[:num_batch_axes]), int):
        form = "plain"  # weighted, or a symbolic batch (jax.export): the sums that take any size
    if form is not None:
        return (plain if form == "plain" else tuned)(stats, deviation, mask)
    return jax.lax.platform_dependent(stats, deviation, mask, cpu=tuned, default=plain)


def plain_sums(deviation, mask, num_batch_axes: int, weights=None):
    """The totals ``(3, *S)`` by one sum each (:func:`_sum_batch`), unselected entries zeroed.

    With ``weights`` (0 outside ``mask``), the weighted totals ``(sum w d, sum w d^2, sum w)``;
    an entry of weight 0 adds 0, whatever its deviation.
    """
    if weights is not None:
        deviation = jnp.where(weights > 0, deviation, 0.0)
        weighted = weights * deviation
        terms = (weighted, weighted * deviation, weights)
        return jnp.stack([_sum_batch(term, num_batch_axes) for term in terms])
    if mask is None:
        size = math.prod(deviation.shape[:num_batch_axes])
        count = jnp.full(deviation.shape[num_batch_axes:], size, deviation.dtype)
    else:
        deviation = jnp.where(mask, deviation, 0.0)
        count = _sum_batch(mask.astype(deviation.dtype), num_batch_axes)
    return jnp.stack(
        [
            _sum_batch(deviation, num_batch_axes),
            _sum_batch(deviation * deviation, num_batch_axes),
            count,
        ]
    )


def _sum_batch(x, num_batch_axes: int):
    """``x`` of shape ``(*B, *S)`` summed over ``B``.

    Several statistics (``s = prod(S)`` of them, ``1 < s < _ROW``) are summed
    as rows of ``k = _ROW // s`` entries side by side, ``(E / k, k s)``, then
    the ``k`` partial sums of each statistic added: the whole step with three
    statistics ran 2-5x slower on a GPU with a narrow ``(E, s)`` array summed
    over ``E`` (``E`` = 4096, 1M, 4M on an H200; only at 65536 was it faster, by
    a fifth), as the GPU's threads each read a few of a row's values.
    """
    stats_shape = x.shape[num_batch_axes:]
    statistics = math.prod(stats_shape)
    entries = math.prod(x.shape[:num_batch_axes])
    if not (1 < statistics < _ROW and isinstance(entries, int)):
        return jnp.sum(x, tuple(range(num_batch_axes)))
    x = x.reshape(entries, statistics)
    k = _ROW // statistics
    head = entries - entries % k
    total = jnp.sum(x[head:], 0)
    if head:
        rows = jnp.sum(x[:head].reshape(head // k, k * statistics), 0)
        total = total + jnp.sum(rows.reshape(k, statistics), 0)
    return total.reshape(stats_shape)


def cpu_sums(deviation, mask, num_batch_axes: int, weighted: bool):
    """Partial totals, a tuple of ``(3, *S)`` arrays whose sum is the totals (see the module)."""
    entries = math.prod(deviation.shape[:num_batch_axes])
    one_statistic = num_batch_axes > 0 and deviation.ndim == num_batch_axes and entries > 0
    if mask is None:
        by_products = one_statistic and entries < _HALVES_FROM
    else:
        by_products = one_statistic and weighted and entries <= _PRODUCTS_UP_TO
    if by_products:
        weights = jnp.ones(entries, bool) if mask is None else mask.reshape(entries)
        return _weighted_sums(deviation.reshape(entries), weights)
    if mask is None:
        terms = (deviation, deviation * deviation, jnp.ones_like(deviation))
    else:  # unselected entries may hold NaN: selected away, never multiplied
        deviation = jnp.where(mask, deviation, 0.0)
        terms = (deviation, deviation * deviation, mask.astype(deviation.dtype))
    stats_shape = deviation.shape[num_batch_axes:]
    rows = tuple(term.reshape(entries, *stats_shape) for term in terms)
    statistics = math.prod(stats_shape)
    if 1 < statistics <= _NARROW_UP_TO or statistics >= _WIDE_STATISTICS:
        return (jnp.stack([jnp.sum(row, axis=0) for row in rows]),)
    return _reduce_in_blocks(rows)


def _reduce_in_blocks(terms):
    """Partial totals of the terms ``(entries, *S)``: one variadic reduction per block.

    A variadic reduction adds its entries one after another, so its rounding
    error grows with their number: blocks of ``_BLOCK`` entries are reduced in
    one pass, and the blocks' sums summed by one ``jnp.sum``.
    """
    entries = terms[0].shape[0]
    zeros = (jnp.zeros((), terms[0].dtype),) * len(terms)
    blocks, rest = divmod(entries, _BLOCK)
    parts = []
    if blocks:
        rows = tuple(
            term[: blocks * _BLOCK].reshape(blocks, _BLOCK, *term.shape[1:]) for term in terms
        )
        block_sums = jax.lax.reduce(rows, zeros, _add_terms, (1,))
        parts.append(jnp.sum(jnp.stack(block_sums), axis=1))
    if rest or not blocks:  # (an empty batch sums to zeros)
        tail = tuple(term[blocks * _BLOCK :] for term in terms)
        parts.append(jnp.stack(jax.lax.reduce(tail, zeros, _add_terms, (0,))))
    return tuple(parts)


def _add_terms(a, b):
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _weighted_sums(deviation, mask):
    """Sums of ``(d, d^2, 1)`` weighted by the mask, by vector-matrix products.

    ``deviation`` and ``mask`` are vectors (one statistic). Returns one
    ``(3,)`` array of partial sums per product. The terms are clamped to the
    dtype's range, so that a weight of 0 always gives 0 (never ``0 * inf``);
    the merge saturates a sum that reaches the range's end.
    """
    weights = mask.astype(deviation.dtype)
    entries = deviation.shape[0]
    per_product = (_PRODUCT_BYTES - 1) // deviation.dtype.itemsize
    products = max(1 if entries < _HALVES_FROM else 2, -(-entries // per_product))
    size = -(-entries // products)
    return tuple(
        jnp.matmul(
            weights[start : start + size],
            _clamped_terms(deviation[start : start + size]).T,
            precision=jax.lax.Precision.HIGHEST,
        )
        for start in range(0, entries, size)
    )


def _clamped_terms(deviation):
    """The rows ``(d, d^2, 1)``, ``d`` and ``d^2`` clamped to the dtype's range."""
    largest = jnp.finfo(deviation.dtype).max
    deviation = jnp.clip(deviation, -largest, largest)
    square = jnp.minimum(deviation * deviation, largest)
    return jnp.stack([deviation, square, jnp.ones_like(deviation)])


def _merge_in_one_kernel(merge, stats, parts):
    """``merge(stats, sum(parts))``, as one XLA:CPU kernel when the statistics are small.

    XLA:CPU compiles a ``while`` loop whose buffers are small (a few scalars
    per statistic) into a single kernel, where the same arithmetic in
    straight-line code is split into a dozen fusions, each a dispatch per
    step. So the merge runs as a loop of one trip: its condition reads the
    sums of squares (never negative, or NaN: the compiler cannot know the
    trip count, so it keeps the loop) and the body marks them consumed. The
    partial sums are added inside it: added outside, XLA rewrites a sum of
    products into one product of concatenated rows, 2-3x slower.
    """

    def total(parts):
        return sum(parts[1:], parts[0])

    if not 0 < parts[0][1].size <= _ONE_KERNEL_STATISTICS:  # (an empty loop never ends)
        return merge(stats, total(parts))

    def body(carry):
        stats, parts = carry
        return merge(stats, total(parts)), (parts[0].at[1].set(-1.0), *parts[1:])

    def pending(carry):
        return jnp.all(~(carry[1][0][1] < 0))

    return jax.lax.while_loop(pending, body, (stats, parts))[0]


def power_of_two(largest: jax.Array) -> jax.Array:
    """The power of two that brings ``largest`` > 0 into [0.5, 1): a normal number (else 1).

    Built bit by bit (exactly), clipped to the dtype's normal exponents.
    """
    info = jnp.finfo(largest.dtype)
    _, exponent = jnp.frexp(jnp.where(jnp.isfinite(largest) & (largest > 0), largest, 1))
    exponent = jnp.clip(exponent, info.minexp + 1, info.maxexp - 2)
    return _power_of_two(-exponent, largest.dtype)


def _power_of_two(exponent: jax.Array, dtype) -> jax.Array:
    """:math:`2^e` of ``dtype`` for integer exponents of normal numbers, bit by bit (exactly)."""
    info = jnp.finfo(dtype)
    unsigned = jnp.uint64 if info.bits == 64 else jnp.uint32
    biased = (exponent + (info.maxexp - 1)).astype(unsigned)
    return jax.lax.bitcast_convert_type(biased << info.nmant, dtype)
