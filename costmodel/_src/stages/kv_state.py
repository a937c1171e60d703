"""Per-GPU cache memory and cache reads of an engine, by attention kind.

What one GPU of an engine holds and reads for one sequence: the KV cache of
its softmax-attention layers (full ones grow with the length, sliding-window
ones stop at the window, DeepSeek sparse attention adds the indexer's keys)
and the fixed recurrent state of its linear-attention layers
(:mod:`costmodel._src.specs.mixers` has the per-model formulas). An engine's
concurrency is its cache budget over :func:`seq_cache_bytes_per_gpu`, so a
hybrid model whose linear layers need no KV cache holds more sequences at
long context than a full-attention model of the same size.

Sharding: GQA KV heads split over TP while ``n_kv_heads >= tp`` and are
replicated past it; MLA's latent is replicated on every TP rank; the linear
layers' state splits by their value heads (Mamba: its heads) in the same way. With
DP-attention each GPU holds only its own sequences (the engine's sequences
spread over its ``tp`` GPUs). Pipeline stages split the layers.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import smooth
from costmodel._src.specs import mixers
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import speculative


def _divisors(model: ModelSpec, engine: Engine):
  """(KV divisor, linear-state divisor) of one GPU's share of a sequence's cache."""
  # generate imports this module; its DP-attention switch is looked up at call time.
  from costmodel._src.stages import generate as generate_lib  # pylint: disable=g-import-not-at-top
  def off():
    kv_tp = 1.0 if model.is_mla else smooth.smin(engine.tp, float(model.n_kv_heads))
    lin_tp = smooth.smin(engine.tp, float(model.state_heads))
    return kv_tp * engine.pp, lin_tp * engine.pp

  def on():
    return engine.tp * engine.pp, engine.tp * engine.pp

  return generate_lib.dp_attention_select(engine, on, off)


def _split(model: ModelSpec, engine: Engine, total, state):
  kv_div, state_div = _divisors(model, engine)
  return (total - state) / kv_div + state / state_div


def seq_cache_bytes_per_gpu(model: ModelSpec, engine: Engine, kv_bytes: float, length):
  """Cache bytes one GPU of the engine holds for one sequence of ``length`` tokens.

  With speculative decoding the draft's KV cache per token comes on top. The
  recurrent state is held in the engine's state format (``Precision.state``).
  """
  state_b = precision_lib.state_bytes(engine.precision, kv_bytes)
  total = mixers.seq_cache_bytes(model, length, kv_bytes, state_b)
  state = mixers.state_bytes_per_seq(model, kv_bytes, state_b)
  draft = speculative.draft_kv_bytes_per_token_per_gpu(model, engine, kv_bytes) * length
  return _split(model, engine, total, state) + draft


def kv_read_bytes_per_gpu(model: ModelSpec, engine: Engine, kv_bytes: float, context):
  """Cache bytes one GPU reads (and, for recurrent state, writes) per sequence per decode step."""
  state_b = precision_lib.state_bytes(engine.precision, kv_bytes)
  total = mixers.kv_read_bytes(model, context, kv_bytes, state_b)
  state = 2.0 * mixers.state_bytes_per_seq(model, kv_bytes, state_b)
  return _split(model, engine, total, jnp.asarray(state))
