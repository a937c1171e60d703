"""Measurement kernels of the GPU calibration: the timing loop, matmul
throughput and HBM bandwidth (see :mod:`benchmarks.gpu_calibration`)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import math
import statistics
import time
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp

DTYPE = jnp.bfloat16
_MAX_CALLS_PER_REPEAT = 1000


def check_positive_int(name: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}={value!r} must be a positive int")


def check_timing(repeats: int, min_repeat_s: float) -> None:
  check_positive_int("repeats", repeats)
  if not min_repeat_s >= 0:
    raise ValueError(f"min_repeat_s={min_repeat_s!r} must be >= 0")


def median_call_s(call: Callable[[], Any], repeats: int,
                   min_repeat_s: float) -> float:
  """Median seconds per `call()` after a warm-up call.

  Args:
    call: Issues one (asynchronous) computation and returns its outputs.
    repeats: Number of timed repeats.
    min_repeat_s: Each repeat issues `call` back to back until it lasts at
      least this long (at most `_MAX_CALLS_PER_REPEAT` calls).

  Returns:
    The median over repeats of the repeat's wall time divided by its calls.
  """
  jax.block_until_ready(call())  # Compile and warm up.
  start = time.perf_counter()
  jax.block_until_ready(call())
  single_s = max(time.perf_counter() - start, 1e-9)
  calls = min(_MAX_CALLS_PER_REPEAT, max(1, math.ceil(min_repeat_s / single_s)))
  times_s = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(calls):
      out = call()
    jax.block_until_ready(out)
    times_s.append((time.perf_counter() - start) / calls)
  return statistics.median(times_s)


def measure_matmul(shapes_mnk: Sequence[tuple[int, int, int]], *,
                   repeats: int = 5, min_repeat_s: float = 0.02,
                   peak_flops_per_s: float | None = None,
                   seed: int = 0) -> list[dict[str, Any]]:
  """Times `jnp.dot(a, b)` for bf16 `a[m, k]`, `b[k, n]`.

  FLOPs are `2 * m * n * k`; XLA accumulates in float32 and returns bf16.

  Args:
    shapes_mnk: The `(m, n, k)` shapes to time.
    repeats: Timed repeats per shape; the median is reported.
    min_repeat_s: Minimum duration of one repeat, see `median_call_s`.
    peak_flops_per_s: Peak to report `fraction_of_peak` against, or None.
    seed: PRNG seed for the operands.

  Returns:
    One dict per shape with keys `m, n, k, dtype, out_dtype, flops, seconds,
    flops_per_s, fraction_of_peak` (None without a peak).

  Raises:
    ValueError: If a dimension, `repeats` or `peak_flops_per_s` is invalid.
  """
  check_timing(repeats, min_repeat_s)
  if peak_flops_per_s is not None and not peak_flops_per_s > 0:
    raise ValueError(f"peak_flops_per_s={peak_flops_per_s!r} must be > 0")
  shapes_mnk = [tuple(s) for s in shapes_mnk]
  for shape in shapes_mnk:
    if len(shape) != 3:
      raise ValueError(f"shapes_mnk entry {shape!r} must be (m, n, k)")
    for name, value in zip("mnk", shape, strict=True):
      check_positive_int(name, value)
  dot = jax.jit(jnp.dot)
  key = jax.random.key(seed)
  records = []
  for m, n, k in shapes_mnk:
    key_a, key_b, key = jax.random.split(key, 3)
    a = jax.random.normal(key_a, (m, k), DTYPE)
    b = jax.random.normal(key_b, (k, n), DTYPE)
    seconds = median_call_s(lambda a=a, b=b: dot(a, b), repeats, min_repeat_s)
    flops = 2 * m * n * k
    logging.info("matmul m=%d n=%d k=%d: %.3g s, %.3g FLOP/s", m, n, k,
                 seconds, flops / seconds)
    records.append({
        "m": m, "n": n, "k": k, "dtype": jnp.dtype(DTYPE).name,
        "out_dtype": jnp.dtype(jax.eval_shape(dot, a, b).dtype).name,
        "flops": flops, "seconds": seconds, "flops_per_s": flops / seconds,
        "fraction_of_peak": (None if peak_flops_per_s is None else
                             flops / seconds / peak_flops_per_s),
    })
    del a, b
  return records


def _scale(x: jax.Array) -> jax.Array:
  return x * 2


def _sum(x: jax.Array) -> jax.Array:
  return jnp.sum(x)


_HBM_KERNELS = {"scale": _scale, "sum": _sum}


def measure_hbm(sizes_bytes: Sequence[int], *, repeats: int = 5,
                min_repeat_s: float = 0.02,
                kernels: Sequence[str] = ("scale", "sum")
                ) -> list[dict[str, Any]]:
  """Times memory-bound kernels over bf16 arrays of the given sizes.

  Bandwidth is `(bytes_read + bytes_written) / seconds`, where the bytes are
  the sizes of the kernel's input and output arrays.

  Args:
    sizes_bytes: Input array sizes; each a positive multiple of 2 bytes.
    repeats: Timed repeats per size; the median is reported.
    min_repeat_s: Minimum duration of one repeat, see `median_call_s`.
    kernels: Names from `scale` (`x * 2`) and `sum` (`jnp.sum(x)`).

  Returns:
    One dict per (kernel, size) with keys `kernel, n_elements, dtype,
    bytes_read, bytes_written, bytes_moved, seconds, bytes_per_s`.

  Raises:
    ValueError: If a size, kernel name or `repeats` is invalid.
  """
  check_timing(repeats, min_repeat_s)
  itemsize = jnp.dtype(DTYPE).itemsize
  for size in sizes_bytes:
    check_positive_int("sizes_bytes", size)
    if size % itemsize:
      raise ValueError(f"sizes_bytes={size} must be a multiple of {itemsize}")
  for name in kernels:
    if name not in _HBM_KERNELS:
      raise ValueError(f"kernels={name!r} must be one of {list(_HBM_KERNELS)}")
  records = []
  for size in sizes_bytes:
    n = size // itemsize
    shape = (n // 1024, 1024) if n % 1024 == 0 else (n,)  # Keep dims < 2**31.
    x = jnp.ones(shape, DTYPE)
    for name in kernels:
      fn = jax.jit(_HBM_KERNELS[name])
      out = jax.eval_shape(fn, x)
      bytes_written = math.prod(out.shape) * jnp.dtype(out.dtype).itemsize
      seconds = median_call_s(lambda fn=fn, x=x: fn(x), repeats, min_repeat_s)
      bytes_moved = x.nbytes + bytes_written
      logging.info("hbm %s %d bytes: %.3g s, %.3g bytes/s", name, x.nbytes,
                   seconds, bytes_moved / seconds)
      records.append({
          "kernel": name, "n_elements": n, "dtype": jnp.dtype(DTYPE).name,
          "bytes_read": x.nbytes, "bytes_written": bytes_written,
          "bytes_moved": bytes_moved, "seconds": seconds,
          "bytes_per_s": bytes_moved / seconds,
      })
    del x
  return records
