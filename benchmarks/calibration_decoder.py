"""The decoder of the GPU calibration's decode measurements: its configuration,
weights, KV cache and step, the decode timings and the host-overhead fit (see
:mod:`benchmarks.gpu_calibration`)."""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import math
import time
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.calibration_kernels import DTYPE
from benchmarks.calibration_kernels import check_positive_int
from benchmarks.calibration_kernels import check_timing
from benchmarks.calibration_kernels import median_call_s


def _decode_batches(batches) -> list[int]:
  """``batches`` as a list, checked non-empty and of positive ints."""
  batches = list(batches)
  if not batches:
    raise ValueError(f"decode_batches={batches!r} must not be empty")
  for batch in batches:
    check_positive_int("decode_batches", batch)
  return batches


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
      check_positive_int(field.name, getattr(self, field.name))
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
    itemsize = jnp.dtype(DTYPE).itemsize
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


def init_decoder(key: jax.Array, config: DecoderConfig) -> dict[str, Any]:
  """Random bf16 weights, scaled by `1 / sqrt(fan_in)`, norms set to one."""

  def dense(key, fan_in, fan_out):
    w = jax.random.normal(key, (fan_in, fan_out), jnp.float32)
    return (w / math.sqrt(fan_in)).astype(DTYPE)

  d, hd = config.d_model, config.head_dim
  keys = jax.random.split(key, config.n_layers + 2)
  layers = []
  for layer_key in keys[:-2]:
    k = jax.random.split(layer_key, 7)
    layers.append({
        "attn_norm": jnp.ones((d,), DTYPE),
        "wq": dense(k[0], d, config.n_heads * hd),
        "wk": dense(k[1], d, config.n_kv_heads * hd),
        "wv": dense(k[2], d, config.n_kv_heads * hd),
        "wo": dense(k[3], config.n_heads * hd, d),
        "mlp_norm": jnp.ones((d,), DTYPE),
        "w_gate": dense(k[4], d, config.d_ff),
        "w_up": dense(k[5], d, config.d_ff),
        "w_down": dense(k[6], config.d_ff, d),
    })
  return {
      "embed": jax.random.normal(keys[-2], (config.vocab_size, d),
                                 jnp.float32).astype(DTYPE),
      "layers": layers,
      "final_norm": jnp.ones((d,), DTYPE),
      "lm_head": dense(keys[-1], d, config.vocab_size),
  }


def init_kv_cache(config: DecoderConfig, batch: int) -> list[dict[str, Any]]:
  """Zero KV cache: per layer `k`, `v` of shape `[batch, T, n_kv, head_dim]`."""
  check_positive_int("batch", batch)
  shape = (batch, config.context_len, config.n_kv_heads, config.head_dim)
  return [{"k": jnp.zeros(shape, DTYPE), "v": jnp.zeros(shape, DTYPE)}
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
    weights = jax.nn.softmax(scores, axis=-1).astype(DTYPE)
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
    min_repeat_s: Minimum duration of one repeat, see `median_call_s`.
    seed: PRNG seed for the weights.

  Returns:
    One dict per batch size with keys `batch, context_len, seconds,
    tokens_per_s, flops, weight_bytes_read, kv_bytes_read, kv_bytes_written,
    bytes_min, flops_per_s, bytes_per_s`.

  Raises:
    ValueError: If `batches` is empty or holds a non-positive entry, or
      `repeats` is invalid.
  """
  check_timing(repeats, min_repeat_s)
  batches = _decode_batches(batches)
  params = init_decoder(jax.random.key(seed), config)
  step = jax.jit(decode_step, static_argnames="config", donate_argnums=1)
  itemsize = jnp.dtype(DTYPE).itemsize
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

    seconds = median_call_s(call, repeats, min_repeat_s)
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
  check_positive_int("steps_per_batch", steps_per_batch)
  batches = sorted(_decode_batches(batches), reverse=True)
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
      **dataclasses.asdict(config), "dtype": jnp.dtype(DTYPE).name,
      "n_params": config.n_params,
      "param_bytes": config.n_params * jnp.dtype(DTYPE).itemsize,
      "kv_bytes_per_token": config.kv_bytes_per_token,
      "flops_per_token": config.flops_per_token,
  }
