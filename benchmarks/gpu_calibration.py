"""Measures matmul throughput, HBM bandwidth and decode step time on one device.

The numbers calibrate the roofline cost model: achieved matmul FLOP/s as a
function of shape, achieved memory bandwidth as a function of transfer size,
and the wall time of one decode step of a small decoder-only transformer whose
dimensions are recorded so the cost model can predict the same step.

Every timing jits the kernel, runs it once to compile and warm up, then takes
the median over `repeats` repeats. A repeat issues the kernel back to back
enough times to last at least `min_repeat_s` and blocks on the last result, so
the reported time per call includes dispatch overhead only where it is larger
than the kernel itself (small matmuls, small copies, small decode batches).

The full sizes are bf16 matmuls with m = 1, 2, 4, ..., 8192 against (k, n)
weights 4096x4096, 4096x14336, 14336x4096 and 8192x28672; bandwidth kernels
over 1 MiB ... 4 GiB arrays in powers of two; and decode steps of a model with
TinyLlama-1.1B dimensions (22 layers, d_model 2048, 32 query and 4 KV heads,
gated MLP 5632, vocab 32000) over a 2048-token KV cache at batch 1 ... 512
(about 24 GB of cache at batch 512). They are bounded so the run, compilation
and autotuning included, stays within about four minutes on an H200.

Usage, from the repository root::

  # On a GPU (989e12 is the H200's dense bf16 peak):
  python -m benchmarks.gpu_calibration --out=/tmp/h200.json \
      --peak_flops_per_s=989e12

  # Tiny sizes, a few seconds on a CPU:
  python -m benchmarks.gpu_calibration --quick --out=/tmp/cpu.json

Flags: `--out` (JSON path, required), `--quick` (tiny sizes), `--repeats`
(timed repeats per measurement, default 5, 3 with `--quick`),
`--peak_flops_per_s` (optional; adds `fraction_of_peak` to matmul records),
`--max_hbm_bytes` (largest array of the bandwidth sweep, default 4 GiB, 1 MiB
with `--quick`), `--decode_batches` (comma-separated batch sizes, default
1,2,4,...,512, or 1,2,4 with `--quick`), `--decode_context_len` (KV cache
length, default 2048, 32 with `--quick`).

JSON schema (all sizes in bytes, all times in seconds)::

  {
    "schema_version": 2,
    "date": "2025-01-31T12:00:00+00:00",          # ISO 8601, UTC
    "jax_version": "0.4.35",
    "device": {"platform": "gpu", "device_kind": "NVIDIA H200",
               "device_count": 1},
    "config": {"quick": false, "repeats": 5, "min_repeat_s": 0.02,
               "peak_flops_per_s": 9.89e14 | null,
               "max_hbm_bytes": 4294967296, "decode_batches": [1, ...],
               "decode_context_len": 2048},
    "matmul": [                                   # C[m, n] = A[m, k] B[k, n]
      {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16",
       "out_dtype": "bfloat16", "flops": 2*m*n*k, "seconds": ...,
       "flops_per_s": ..., "fraction_of_peak": ... | null}, ...],
    "hbm": [                                      # kernel "scale" or "sum"
      {"kernel": "scale", "n_elements": ..., "dtype": "bfloat16",
       "bytes_read": ..., "bytes_written": ..., "bytes_moved": ...,
       "seconds": ..., "bytes_per_s": ...}, ...],
    "decode_model": {"vocab_size": ..., "d_model": ..., "n_layers": ...,
                     "n_heads": ..., "n_kv_heads": ..., "head_dim": ...,
                     "d_ff": ..., "context_len": ..., "dtype": "bfloat16",
                     "n_params": ..., "param_bytes": ...,
                     "kv_bytes_per_token": ..., "flops_per_token": ...},
    "decode": [
      {"batch": 1, "context_len": ..., "seconds": ..., "tokens_per_s": ...,
       "flops": ..., "weight_bytes_read": ..., "kv_bytes_read": ...,
       "kv_bytes_written": ..., "bytes_min": ..., "flops_per_s": ...,
       "bytes_per_s": ...}, ...],
    "decode_loop": [                              # shrinking batch, engine-like
      {"batch": 512, "steps": 32, "kernel_seconds_per_step": ...,
       "loop_seconds_per_step": ..., "host_overhead_s": ...}, ...],
    "step_overhead_fit": {"decode_step_overhead_s": ...,
                          "decode_seq_overhead_s": ...},
    "elapsed_s": ...                              # wall time of the run
  }

`decode_loop` runs the decode step with the batch shrinking (largest first),
once back to back on the device and once as an engine does, with the sampled
tokens copied to the host every step; the difference per step is the host
overhead, fitted as fixed + per-sequence (`step_overhead_fit`, the cost
model's `Efficiency.decode_step_overhead_s` and `decode_seq_overhead_s`).

`scale` computes `y = x * 2` (reads and writes the array); `sum` reduces the
array to a scalar (reads it once). A decode step feeds one new token per
sequence, writes its keys and values at the last cache slot and attends over
all `context_len` slots; `bytes_min` is the unavoidable traffic (weights,
KV cache read and write), activations excluded.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import datetime
import json
import math
import statistics
import time
from typing import Any

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

_SCHEMA_VERSION = 2
_DTYPE = jnp.bfloat16
_MAX_CALLS_PER_REPEAT = 1000

# (k, n) of transformer projections: attention 4096x4096, Llama-3-8B MLP
# up/down, Llama-3-70B MLP up.
_FULL_MATMUL_KN = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672))
_FULL_MATMUL_M = tuple(2**i for i in range(14))  # 1 ... 8192
_QUICK_MATMUL_KN = ((128, 128), (128, 256))
_QUICK_MATMUL_M = (1, 16, 128)

_FULL_HBM_MIN_BYTES = 2**20
_FULL_HBM_MAX_BYTES = 2**32
_QUICK_HBM_MIN_BYTES = 2**16
_QUICK_HBM_MAX_BYTES = 2**20

_FULL_DECODE_BATCHES = tuple(2**i for i in range(10))  # 1 ... 512
_QUICK_DECODE_BATCHES = (1, 2, 4)


def _check_positive_int(name: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}={value!r} must be a positive int")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """Dimensions of the decoder-only transformer timed by `measure_decode`.

  Attributes:
    vocab_size: Vocabulary size (embedding rows and LM head columns).
    d_model: Residual stream width.
    n_layers: Number of transformer blocks.
    n_heads: Query heads per block.
    n_kv_heads: Key/value heads per block (grouped-query attention).
    head_dim: Width of one attention head.
    d_ff: Hidden width of the gated MLP.
    context_len: KV cache length; a decode step attends over all of it.
  """

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  d_ff: int
  context_len: int

  def __post_init__(self):
    for field in dataclasses.fields(self):
      _check_positive_int(field.name, getattr(self, field.name))
    if self.n_heads % self.n_kv_heads:
      raise ValueError(
          f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")

  @property
  def n_params(self) -> int:
    """Parameter count, embedding and LM head included."""
    d, hd = self.d_model, self.head_dim
    attn = d * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * d
    block = attn + 3 * d * self.d_ff + 2 * d
    return self.n_layers * block + 2 * self.vocab_size * d + d

  @property
  def kv_bytes_per_token(self) -> int:
    """Bytes of keys and values cached per token, all layers."""
    itemsize = jnp.dtype(_DTYPE).itemsize
    return 2 * self.n_layers * self.n_kv_heads * self.head_dim * itemsize

  @property
  def flops_per_token(self) -> int:
    """Decode FLOPs per token: 2 * matmul params + attention over the cache."""
    matmul_params = self.n_params - self.vocab_size * self.d_model - (
        2 * self.n_layers + 1) * self.d_model
    attn = 4 * self.n_layers * self.n_heads * self.head_dim * self.context_len
    return 2 * matmul_params + attn


# TinyLlama-1.1B dimensions.
FULL_DECODER = DecoderConfig(
    vocab_size=32000, d_model=2048, n_layers=22, n_heads=32, n_kv_heads=4,
    head_dim=64, d_ff=5632, context_len=2048)
QUICK_DECODER = DecoderConfig(
    vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
    head_dim=16, d_ff=128, context_len=32)


def _check_timing(repeats: int, min_repeat_s: float) -> None:
  _check_positive_int("repeats", repeats)
  if not min_repeat_s >= 0:
    raise ValueError(f"min_repeat_s={min_repeat_s!r} must be >= 0")


def _median_call_s(call: Callable[[], Any], repeats: int,
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
    min_repeat_s: Minimum duration of one repeat, see `_median_call_s`.
    peak_flops_per_s: Peak to report `fraction_of_peak` against, or None.
    seed: PRNG seed for the operands.

  Returns:
    One dict per shape with keys `m, n, k, dtype, out_dtype, flops, seconds,
    flops_per_s, fraction_of_peak` (None without a peak).

  Raises:
    ValueError: If a dimension, `repeats` or `peak_flops_per_s` is invalid.
  """
  _check_timing(repeats, min_repeat_s)
  if peak_flops_per_s is not None and not peak_flops_per_s > 0:
    raise ValueError(f"peak_flops_per_s={peak_flops_per_s!r} must be > 0")
  shapes_mnk = [tuple(s) for s in shapes_mnk]
  for shape in shapes_mnk:
    if len(shape) != 3:
      raise ValueError(f"shapes_mnk entry {shape!r} must be (m, n, k)")
    for name, value in zip("mnk", shape, strict=True):
      _check_positive_int(name, value)
  dot = jax.jit(jnp.dot)
  key = jax.random.key(seed)
  records = []
  for m, n, k in shapes_mnk:
    key_a, key_b, key = jax.random.split(key, 3)
    a = jax.random.normal(key_a, (m, k), _DTYPE)
    b = jax.random.normal(key_b, (k, n), _DTYPE)
    seconds = _median_call_s(lambda a=a, b=b: dot(a, b), repeats, min_repeat_s)
    flops = 2 * m * n * k
    logging.info("matmul m=%d n=%d k=%d: %.3g s, %.3g FLOP/s", m, n, k,
                 seconds, flops / seconds)
    records.append({
        "m": m, "n": n, "k": k, "dtype": jnp.dtype(_DTYPE).name,
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
    min_repeat_s: Minimum duration of one repeat, see `_median_call_s`.
    kernels: Names from `scale` (`x * 2`) and `sum` (`jnp.sum(x)`).

  Returns:
    One dict per (kernel, size) with keys `kernel, n_elements, dtype,
    bytes_read, bytes_written, bytes_moved, seconds, bytes_per_s`.

  Raises:
    ValueError: If a size, kernel name or `repeats` is invalid.
  """
  _check_timing(repeats, min_repeat_s)
  itemsize = jnp.dtype(_DTYPE).itemsize
  for size in sizes_bytes:
    _check_positive_int("sizes_bytes", size)
    if size % itemsize:
      raise ValueError(f"sizes_bytes={size} must be a multiple of {itemsize}")
  for name in kernels:
    if name not in _HBM_KERNELS:
      raise ValueError(f"kernels={name!r} must be one of {list(_HBM_KERNELS)}")
  records = []
  for size in sizes_bytes:
    n = size // itemsize
    shape = (n // 1024, 1024) if n % 1024 == 0 else (n,)  # Keep dims < 2**31.
    x = jnp.ones(shape, _DTYPE)
    for name in kernels:
      fn = jax.jit(_HBM_KERNELS[name])
      out = jax.eval_shape(fn, x)
      bytes_written = math.prod(out.shape) * jnp.dtype(out.dtype).itemsize
      seconds = _median_call_s(lambda fn=fn, x=x: fn(x), repeats, min_repeat_s)
      bytes_moved = x.nbytes + bytes_written
      logging.info("hbm %s %d bytes: %.3g s, %.3g bytes/s", name, x.nbytes,
                   seconds, bytes_moved / seconds)
      records.append({
          "kernel": name, "n_elements": n, "dtype": jnp.dtype(_DTYPE).name,
          "bytes_read": x.nbytes, "bytes_written": bytes_written,
          "bytes_moved": bytes_moved, "seconds": seconds,
          "bytes_per_s": bytes_moved / seconds,
      })
    del x
  return records


def init_decoder(key: jax.Array, config: DecoderConfig) -> dict[str, Any]:
  """Random bf16 weights, scaled by `1 / sqrt(fan_in)`, norms set to one."""

  def dense(key, fan_in, fan_out):
    w = jax.random.normal(key, (fan_in, fan_out), jnp.float32)
    return (w / math.sqrt(fan_in)).astype(_DTYPE)

  d, hd = config.d_model, config.head_dim
  keys = jax.random.split(key, config.n_layers + 2)
  layers = []
  for layer_key in keys[:-2]:
    k = jax.random.split(layer_key, 7)
    layers.append({
        "attn_norm": jnp.ones((d,), _DTYPE),
        "wq": dense(k[0], d, config.n_heads * hd),
        "wk": dense(k[1], d, config.n_kv_heads * hd),
        "wv": dense(k[2], d, config.n_kv_heads * hd),
        "wo": dense(k[3], config.n_heads * hd, d),
        "mlp_norm": jnp.ones((d,), _DTYPE),
        "w_gate": dense(k[4], d, config.d_ff),
        "w_up": dense(k[5], d, config.d_ff),
        "w_down": dense(k[6], config.d_ff, d),
    })
  return {
      "embed": jax.random.normal(keys[-2], (config.vocab_size, d),
                                 jnp.float32).astype(_DTYPE),
      "layers": layers,
      "final_norm": jnp.ones((d,), _DTYPE),
      "lm_head": dense(keys[-1], d, config.vocab_size),
  }


def init_kv_cache(config: DecoderConfig, batch: int) -> list[dict[str, Any]]:
  """Zero KV cache: per layer `k`, `v` of shape `[batch, T, n_kv, head_dim]`."""
  _check_positive_int("batch", batch)
  shape = (batch, config.context_len, config.n_kv_heads, config.head_dim)
  return [{"k": jnp.zeros(shape, _DTYPE), "v": jnp.zeros(shape, _DTYPE)}
          for _ in range(config.n_layers)]


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  scale = scale.astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
  return (x32 * scale).astype(x.dtype)


def decode_step(params: dict[str, Any], cache: list[dict[str, Any]],
                tokens: jax.Array, pos: jax.Array, config: DecoderConfig
                ) -> tuple[jax.Array, list[dict[str, Any]]]:
  """One decode step: one new token per sequence at cache slot `pos`.

  Each block writes the token's keys and values at `pos`, then attends over
  cache slots `0..pos` (the whole cache is read, later slots masked). There
  is no positional encoding; it would not change the cost.

  Args:
    params: From `init_decoder`.
    cache: From `init_kv_cache` or a previous step.
    tokens: int32 `[batch]` token ids.
    pos: int32 scalar cache slot, `0 <= pos < config.context_len`.
    config: Model dimensions (static under jit).

  Returns:
    float32 logits `[batch, vocab_size]` and the updated cache.
  """
  batch = tokens.shape[0]
  n_kv, hd = config.n_kv_heads, config.head_dim
  group = config.n_heads // n_kv
  visible = jnp.arange(config.context_len, dtype=pos.dtype) <= pos  # [T]
  start = (jnp.zeros((), pos.dtype), pos, jnp.zeros((), pos.dtype),
           jnp.zeros((), pos.dtype))  # Cache index [0, pos, 0, 0].
  x = params["embed"][tokens]  # [B, D]
  new_cache = []
  for layer, layer_cache in zip(params["layers"], cache, strict=True):
    h = _rms_norm(x, layer["attn_norm"])
    q = (h @ layer["wq"]).reshape(batch, n_kv, group, hd)
    k_new = (h @ layer["wk"]).reshape(batch, 1, n_kv, hd)
    v_new = (h @ layer["wv"]).reshape(batch, 1, n_kv, hd)
    k = jax.lax.dynamic_update_slice(layer_cache["k"], k_new, start)
    v = jax.lax.dynamic_update_slice(layer_cache["v"], v_new, start)
    new_cache.append({"k": k, "v": v})
    scores = jnp.einsum("bngh,btnh->bngt", q, k,
                        preferred_element_type=jnp.float32) / math.sqrt(hd)
    scores = jnp.where(visible[None, None, None, :], scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(_DTYPE)
    attn = jnp.einsum("bngt,btnh->bngh", weights, v)
    x = x + attn.reshape(batch, config.n_heads * hd) @ layer["wo"]
    h = _rms_norm(x, layer["mlp_norm"])
    gated = jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])
    x = x + gated @ layer["w_down"]
  x = _rms_norm(x, params["final_norm"])
  logits = jnp.dot(x, params["lm_head"], preferred_element_type=jnp.float32)
  return logits, new_cache


def measure_decode(config: DecoderConfig, batches: Sequence[int], *,
                   repeats: int = 5, min_repeat_s: float = 0.02,
                   seed: int = 0) -> list[dict[str, Any]]:
  """Times one jitted decode step (cache donated) per batch size.

  The step writes at the last cache slot, so it attends over all
  `config.context_len` slots. Predicted work per step, for batch `B`:
  `flops = B * config.flops_per_token`; `weight_bytes_read` counts every
  parameter except the embedding table, plus the `B` gathered embedding rows;
  `kv_bytes_read = B * context_len * kv_bytes_per_token`;
  `kv_bytes_written = B * kv_bytes_per_token`.

  Args:
    config: Model dimensions.
    batches: Batch sizes (sequences per step).
    repeats: Timed repeats per batch size; the median is reported.
    min_repeat_s: Minimum duration of one repeat, see `_median_call_s`.
    seed: PRNG seed for the weights.

  Returns:
    One dict per batch size with keys `batch, context_len, seconds,
    tokens_per_s, flops, weight_bytes_read, kv_bytes_read, kv_bytes_written,
    bytes_min, flops_per_s, bytes_per_s`.

  Raises:
    ValueError: If `batches` is empty or holds a non-positive entry, or
      `repeats` is invalid.
  """
  _check_timing(repeats, min_repeat_s)
  batches = list(batches)
  if not batches:
    raise ValueError(f"decode_batches={batches!r} must not be empty")
  for batch in batches:
    _check_positive_int("decode_batches", batch)
  params = init_decoder(jax.random.key(seed), config)
  step = jax.jit(decode_step, static_argnames="config", donate_argnums=1)
  itemsize = jnp.dtype(_DTYPE).itemsize
  embed_params = config.vocab_size * config.d_model
  pos = jnp.asarray(config.context_len - 1, jnp.int32)
  records = []
  for batch in batches:
    tokens = jnp.arange(batch, dtype=jnp.int32) % config.vocab_size
    state = {"cache": init_kv_cache(config, batch)}

    def call(tokens=tokens, state=state):
      logits, state["cache"] = step(params, state["cache"], tokens, pos,
                                    config=config)
      return logits, state["cache"]

    seconds = _median_call_s(call, repeats, min_repeat_s)
    del state["cache"]
    flops = batch * config.flops_per_token
    weight_bytes = ((config.n_params - embed_params) + batch * config.d_model
                    ) * itemsize
    kv_read = batch * config.context_len * config.kv_bytes_per_token
    kv_written = batch * config.kv_bytes_per_token
    bytes_min = weight_bytes + kv_read + kv_written
    logging.info("decode batch=%d: %.3g s, %.3g tokens/s", batch, seconds,
                 batch / seconds)
    records.append({
        "batch": batch, "context_len": config.context_len,
        "seconds": seconds, "tokens_per_s": batch / seconds, "flops": flops,
        "weight_bytes_read": weight_bytes, "kv_bytes_read": kv_read,
        "kv_bytes_written": kv_written, "bytes_min": bytes_min,
        "flops_per_s": flops / seconds, "bytes_per_s": bytes_min / seconds,
    })
  return records


def _sample(logits: jax.Array) -> jax.Array:
  return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def measure_decode_loop(config: DecoderConfig, batches: Sequence[int], *,
                        steps_per_batch: int = 16, seed: int = 0
                        ) -> list[dict[str, Any]]:
  """Times an engine-like decode loop whose batch shrinks, step by step.

  Sequences finish as generation goes on, so an engine's batch shrinks. For
  each batch of `batches` (taken largest first), `steps_per_batch` decode
  steps run twice: back to back on the device (the next tokens stay there:
  kernel time) and as an engine runs them (the sampled tokens come back to
  the host every step, as a detokeniser needs them, and go back as the next
  input: loop time). The difference per step is the host-side overhead the
  cost model calls the per-step engine overhead
  (`Efficiency.decode_step_overhead_s` + `decode_seq_overhead_s * batch`);
  :func:`fit_step_overhead` fits those two numbers.

  Args:
    config: Model dimensions.
    batches: Batch sizes; measured in descending order.
    steps_per_batch: Decode steps per batch size and per variant.
    seed: PRNG seed for the weights.

  Returns:
    One dict per batch size (descending) with keys `batch, steps,
    kernel_seconds_per_step, loop_seconds_per_step, host_overhead_s`.

  Raises:
    ValueError: If `batches` is empty or holds a non-positive entry, or
      `steps_per_batch` is not a positive int.
  """
  _check_positive_int("steps_per_batch", steps_per_batch)
  batches = sorted(list(batches), reverse=True)
  if not batches:
    raise ValueError(f"decode_batches={batches!r} must not be empty")
  for batch in batches:
    _check_positive_int("decode_batches", batch)
  params = init_decoder(jax.random.key(seed), config)
  step = jax.jit(decode_step, static_argnames="config", donate_argnums=1)
  sample = jax.jit(_sample)
  pos = jnp.asarray(config.context_len - 1, jnp.int32)
  records = []
  for batch in batches:
    cache = init_kv_cache(config, batch)
    tokens = jnp.arange(batch, dtype=jnp.int32) % config.vocab_size
    logits, cache = step(params, cache, tokens, pos, config=config)  # compile
    tokens = jax.block_until_ready(sample(logits))
    start = time.perf_counter()
    for _ in range(steps_per_batch):
      logits, cache = step(params, cache, tokens, pos, config=config)
      tokens = sample(logits)
    jax.block_until_ready(tokens)
    kernel_s = (time.perf_counter() - start) / steps_per_batch
    start = time.perf_counter()
    for _ in range(steps_per_batch):
      logits, cache = step(params, cache, tokens, pos, config=config)
      host_tokens = jax.device_get(sample(logits))  # the detokeniser's copy
      tokens = jnp.asarray(host_tokens)
    jax.block_until_ready(tokens)
    loop_s = (time.perf_counter() - start) / steps_per_batch
    del cache
    logging.info("decode loop batch=%d: kernel %.3g s, loop %.3g s per step",
                 batch, kernel_s, loop_s)
    records.append({"batch": batch, "steps": steps_per_batch,
                    "kernel_seconds_per_step": kernel_s,
                    "loop_seconds_per_step": loop_s,
                    "host_overhead_s": loop_s - kernel_s})
  return records


def fit_step_overhead(records: Sequence[dict[str, Any]]) -> dict[str, float]:
  """Least-squares `host_overhead_s = fixed + per_seq * batch` over the loop.

  Returns:
    `{"decode_step_overhead_s": fixed, "decode_seq_overhead_s": per_seq}`,
    the :class:`costmodel.Efficiency` fields they estimate (a single batch
    size gives the fixed part only).

  Raises:
    ValueError: If `records` is empty.
  """
  if not records:
    raise ValueError(f"records={records!r} must not be empty")
  b = np.asarray([r["batch"] for r in records], float)
  y = np.asarray([r["host_overhead_s"] for r in records], float)
  if np.unique(b).size < 2:
    return {"decode_step_overhead_s": float(y.mean()), "decode_seq_overhead_s": 0.0}
  a = np.stack([np.ones_like(b), b], axis=1)
  (fixed, per_seq), *_ = np.linalg.lstsq(a, y, rcond=None)
  return {"decode_step_overhead_s": float(fixed), "decode_seq_overhead_s": float(per_seq)}


def decoder_summary(config: DecoderConfig) -> dict[str, Any]:
  """Model dimensions and derived sizes, as recorded under `decode_model`."""
  return {
      **dataclasses.asdict(config), "dtype": jnp.dtype(_DTYPE).name,
      "n_params": config.n_params,
      "param_bytes": config.n_params * jnp.dtype(_DTYPE).itemsize,
      "kv_bytes_per_token": config.kv_bytes_per_token,
      "flops_per_token": config.flops_per_token,
  }


def hbm_sizes_bytes(min_bytes: int, max_bytes: int) -> list[int]:
  """Powers-of-two ladder `min_bytes * 2**i` up to `max_bytes` inclusive."""
  _check_positive_int("max_hbm_bytes", max_bytes)
  if max_bytes < min_bytes:
    raise ValueError(f"max_hbm_bytes={max_bytes} must be >= {min_bytes}")
  sizes = [min_bytes]
  while sizes[-1] * 2 <= max_bytes:
    sizes.append(sizes[-1] * 2)
  return sizes


def run_all(*, quick: bool = False, repeats: int | None = None,
            peak_flops_per_s: float | None = None,
            max_hbm_bytes: int | None = None,
            decode_batches: Sequence[int] | None = None,
            decode_context_len: int | None = None,
            min_repeat_s: float | None = None) -> dict[str, Any]:
  """Runs the three measurements and returns the JSON-ready report.

  Args:
    quick: Tiny sizes, for CPUs and tests.
    repeats: Timed repeats per measurement (default 5, or 3 when quick).
    peak_flops_per_s: Optional matmul peak for `fraction_of_peak`.
    max_hbm_bytes: Largest bandwidth-sweep array (default 4 GiB, 1 MiB quick).
    decode_batches: Decode batch sizes (default 1..512, or 1, 2, 4 quick).
    decode_context_len: KV cache length (default 2048, or 32 quick).
    min_repeat_s: Minimum duration of one repeat (default 0.02, 0.002 quick).

  Returns:
    A dict with the schema given in the module docstring.

  Raises:
    ValueError: If an argument is invalid; the message names it.
  """
  repeats = (3 if quick else 5) if repeats is None else repeats
  min_repeat_s = (0.002 if quick else 0.02) if min_repeat_s is None else (
      min_repeat_s)
  _check_timing(repeats, min_repeat_s)
  if peak_flops_per_s is not None and not peak_flops_per_s > 0:
    raise ValueError(f"peak_flops_per_s={peak_flops_per_s!r} must be > 0")
  if max_hbm_bytes is None:
    max_hbm_bytes = _QUICK_HBM_MAX_BYTES if quick else _FULL_HBM_MAX_BYTES
  sizes = hbm_sizes_bytes(
      _QUICK_HBM_MIN_BYTES if quick else _FULL_HBM_MIN_BYTES, max_hbm_bytes)
  if decode_batches is None:
    decode_batches = _QUICK_DECODE_BATCHES if quick else _FULL_DECODE_BATCHES
  decode_batches = list(decode_batches)
  if not decode_batches:
    raise ValueError(f"decode_batches={decode_batches!r} must not be empty")
  for batch in decode_batches:
    _check_positive_int("decode_batches", batch)
  decoder = QUICK_DECODER if quick else FULL_DECODER
  if decode_context_len is not None:
    _check_positive_int("decode_context_len", decode_context_len)
    decoder = dataclasses.replace(decoder, context_len=decode_context_len)
  ms, kns = ((_QUICK_MATMUL_M, _QUICK_MATMUL_KN) if quick else
             (_FULL_MATMUL_M, _FULL_MATMUL_KN))
  shapes = [(m, n, k) for k, n in kns for m in ms]
  timing = {"repeats": repeats, "min_repeat_s": min_repeat_s}
  device = jax.devices()[0]
  start = time.perf_counter()
  report = {
      "schema_version": _SCHEMA_VERSION,
      "date": datetime.datetime.now(datetime.UTC).isoformat(
          timespec="seconds"),
      "jax_version": jax.__version__,
      "device": {"platform": device.platform,
                 "device_kind": device.device_kind,
                 "device_count": jax.device_count()},
      "config": {"quick": quick, **timing,
                 "peak_flops_per_s": peak_flops_per_s,
                 "max_hbm_bytes": max_hbm_bytes,
                 "decode_batches": decode_batches,
                 "decode_context_len": decoder.context_len},
      "matmul": measure_matmul(shapes, peak_flops_per_s=peak_flops_per_s,
                               **timing),
      "hbm": measure_hbm(sizes, **timing),
      "decode_model": decoder_summary(decoder),
      "decode": measure_decode(decoder, decode_batches, **timing),
  }
  loop = measure_decode_loop(decoder, decode_batches,
                             steps_per_batch=4 if quick else 32)
  report["decode_loop"] = loop
  report["step_overhead_fit"] = fit_step_overhead(loop)
  report["elapsed_s"] = time.perf_counter() - start
  return report


def _flag_values() -> flags.FlagValues:
  """A private flag set, so importing this module defines no global flags."""
  fv = flags.FlagValues()
  flags.DEFINE_string("out", None, "Path of the JSON report.", flag_values=fv)
  flags.DEFINE_bool("quick", False, "Tiny sizes, for CPUs and tests.",
                    flag_values=fv)
  flags.DEFINE_integer("repeats", None, "Timed repeats (default 5; 3 quick).",
                       flag_values=fv)
  flags.DEFINE_float("peak_flops_per_s", None,
                     "Matmul peak for fraction_of_peak, e.g. 989e12.",
                     flag_values=fv)
  flags.DEFINE_integer("max_hbm_bytes", None,
                       "Largest bandwidth-sweep array (default 4 GiB; 1 MiB "
                       "quick).", flag_values=fv)
  flags.DEFINE_list("decode_batches", None,
                    "Decode batch sizes (default 1,2,...,512; 1,2,4 quick).",
                    flag_values=fv)
  flags.DEFINE_integer("decode_context_len", None,
                       "KV cache length (default 2048; 32 quick).",
                       flag_values=fv)
  return fv


def main(argv: Sequence[str]) -> None:
  """Parses flags from `argv` (program name first) and writes the report.

  Raises:
    ValueError: If a flag value is invalid; the message names the flag.
  """
  fv = _flag_values()
  if any(arg in ("--help", "-h", "--helpfull") for arg in argv[1:]):
    print(fv.get_help())
    return
  fv(list(argv))
  if not fv.out:
    raise ValueError(f"out={fv.out!r} must be a path")
  batches = None
  if fv.decode_batches is not None:
    try:
      batches = [int(b) for b in fv.decode_batches]
    except ValueError:
      raise ValueError(
          f"decode_batches={fv.decode_batches!r} must be ints") from None
  report = run_all(quick=fv.quick, repeats=fv.repeats,
                   peak_flops_per_s=fv.peak_flops_per_s,
                   max_hbm_bytes=fv.max_hbm_bytes, decode_batches=batches,
                   decode_context_len=fv.decode_context_len)
  with open(fv.out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")


def _parse_program_name(argv: list[str]) -> list[str]:
  flags.FLAGS(argv[:1])  # absl's own flags; ours are parsed in `main`.
  return argv


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_program_name)
