"""Time and memory of each kind of token mixer (attention kind) of a model.

Per layer, for a query attending to ``context`` earlier tokens (its position
in decode; the mean, s/2, over a causal sequence):

* full attention: ``2 a (d_qk + d_v)`` FLOPs per key, every key cached
  (GQA: ``2 kv d`` elements per token; MLA: ``kv_lora_rank + rope`` per token);
* sliding window: the same per key over ``min(context, W)`` keys, and at most
  ``W`` tokens cached per sequence;
* DeepSeek sparse attention (``index_topk`` > 0): the lightning indexer
  scores every key (``2 index_heads index_head_dim`` FLOPs per key) and keeps
  one ``index_head_dim`` key per token; the attention itself runs over
  ``min(context, index_topk)`` keys;
* linear attention (Gated DeltaNet, Yang et al. 2024, arXiv:2412.06464):
  no KV cache; per sequence a recurrent state of ``v_heads x d_k x d_v``
  elements and the causal convolution's last ``kernel - 1`` inputs. A token
  costs a fixed ``v_heads (6 d_k d_v + 2 C (d_k + d_v))`` FLOPs, whatever the
  length: three state products (read with q, delta-rule correction with k,
  rank-one update) and, in the chunked form used for prefill and training,
  the intra-chunk attention over chunks of ``C`` = :data:`CHUNK` tokens
  (flash-linear-attention's ``chunk_gated_delta_rule``). Decode pays the same
  constant (the intra-chunk term is under 1% of a layer's projections).
* Mamba-2 (:mod:`mamba`): no KV cache; per sequence the SSM state and the
  convolution's last inputs; a fixed number of scan FLOPs per token.
* a block without a token mixer (``mlp_only``) adds none of these.

Functions take ``context`` and ``length`` as floats or arrays (smooth in
both; ``jnp.minimum`` is differentiable almost everywhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from costmodel._src.specs import mamba

if TYPE_CHECKING:
  from costmodel._src.specs.model import ModelSpec

CHUNK = 64  # flash-linear-attention's chunk length (BT) in chunk_gated_delta_rule


def kv_elements_per_token(model: ModelSpec) -> int:
  """Cached elements per token of one softmax-attention layer (indexer key included)."""
  if model.is_mla:
    per = model.kv_lora_rank + model.qk_rope_head_dim
  else:
    per = 2 * model.n_kv_heads * model.head_dim
  return per + (model.index_head_dim if model.index_topk else 0)


def score_flops_per_key(model: ModelSpec) -> int:
  """Score and value FLOPs per query per key of one softmax layer."""
  return 2 * model.n_heads * (model.qk_head_dim + model.value_head_dim)


def linear_flops_per_token(model: ModelSpec) -> int:
  """Core FLOPs per token of one Gated DeltaNet layer (projections excluded)."""
  dk, dv = model.linear_k_dim, model.linear_v_dim
  return model.linear_v_heads * (6 * dk * dv + 2 * CHUNK * (dk + dv))


def attention_flops_per_token(model: ModelSpec, context):
  """Attention-core FLOPs per token per forward pass, all layers, by kind."""
  n_full = model.n_layers_of("full_attention")
  n_slide = model.n_layers_of("sliding_attention")
  per_key = score_flops_per_key(model)
  if model.index_topk:
    keys = jnp.minimum(context, float(model.index_topk))
    indexer = 2 * model.index_heads * model.index_head_dim * context
    full = n_full * (per_key * keys + indexer)
  else:
    full = n_full * per_key * context
  slide = (n_slide * per_key * jnp.minimum(context, float(model.sliding_window))
           if n_slide else 0.0)
  n_linear = model.n_layers_of("linear_attention")
  n_mamba = model.n_layers_of("mamba")
  return (full + slide + (n_linear * linear_flops_per_token(model) if n_linear else 0.0)
          + (n_mamba * mamba.scan_flops_per_token(model) if n_mamba else 0.0))


def growing_kv_bytes_per_token(model: ModelSpec, bytes_per_element: float = 2.0) -> float:
  """Cache bytes each further token adds while shorter than any window, all layers."""
  return float(model.n_softmax_layers * kv_elements_per_token(model) * bytes_per_element)


def state_bytes_per_seq(model: ModelSpec, bytes_per_element: float = 2.0,
                        state_bytes: float | None = None) -> float:
  """Fixed per-sequence memory of the linear-attention and Mamba layers.

  Recurrent state (Gated DeltaNet: ``v_heads d_k d_v`` elements; Mamba-2:
  ``H P N``) at ``state_bytes``, by default the cache's precision, as vLLM's
  ``mamba_ssm_cache_dtype="auto"`` keeps it (an engine's ``Precision.state``
  sets another), plus the convolution's
  ``kernel - 1`` past inputs (q, k and v; Mamba-2: x, B and C).
  """
  state_bytes = bytes_per_element if state_bytes is None else state_bytes
  n_linear = model.n_layers_of("linear_attention")
  n_mamba = model.n_layers_of("mamba")
  total = 0.0
  if n_linear:
    state = model.linear_v_heads * model.linear_k_dim * model.linear_v_dim * state_bytes
    conv = ((2 * model.linear_qk_width + model.linear_v_width) * (model.linear_conv - 1)
            * bytes_per_element)
    total += n_linear * (state + conv)
  if n_mamba:
    total += n_mamba * (mamba.state_elements(model) * state_bytes
                        + mamba.conv_state_elements(model) * bytes_per_element)
  return float(total)


def seq_cache_bytes(model: ModelSpec, length, bytes_per_element: float = 2.0,
                    state_bytes: float | None = None):
  """Cache bytes one sequence of ``length`` tokens holds, all layers and kinds."""
  per = kv_elements_per_token(model) * bytes_per_element
  n_full = model.n_layers_of("full_attention")
  n_slide = model.n_layers_of("sliding_attention")
  kv = n_full * per * length
  if n_slide:
    kv = kv + n_slide * per * jnp.minimum(length, float(model.sliding_window))
  return kv + state_bytes_per_seq(model, bytes_per_element, state_bytes)


def kv_read_bytes(model: ModelSpec, context, bytes_per_element: float = 2.0,
                  state_bytes: float | None = None):
  """Cache bytes one decode step of one sequence at ``context`` reads (and writes).

  Softmax layers read their cached keys and values (DeepSeek sparse
  attention: the indexer keys of the whole context plus ``index_topk``
  latents); linear layers read and write their state.
  """
  per = kv_elements_per_token(model) * bytes_per_element
  n_full = model.n_layers_of("full_attention")
  n_slide = model.n_layers_of("sliding_attention")
  if model.index_topk:
    latent = (kv_elements_per_token(model) - model.index_head_dim) * bytes_per_element
    full = n_full * (model.index_head_dim * bytes_per_element * context
                     + latent * jnp.minimum(context, float(model.index_topk)))
  else:
    full = n_full * per * context
  slide = n_slide * per * jnp.minimum(context, float(model.sliding_window)) if n_slide else 0.0
  return full + slide + 2.0 * state_bytes_per_seq(model, bytes_per_element, state_bytes)


ATTENTION_ACTIVATION_UNITS = 11.0  # Korthikanti et al. (MLSys'23): 11 s b h bytes per layer


def linear_activation_units(model: ModelSpec) -> float:
  """Stored activation bytes of one Gated DeltaNet layer per token, in units of ``h``.

  The counterpart of the 11 ``s b h`` of softmax attention (16-bit tensors,
  1-byte dropout mask): the input of the projections (2h), their outputs q, k,
  v, z, b, a (``2 (2 qk + 2 v + 2 v_heads)``), the convolved q, k, v
  (``2 (2 qk + v)``), the core output and the gated norm's output (``2 v``
  each) and the dropout mask (h). The chunked kernel's per-chunk states are
  recomputed in the backward pass, not stored.
  """
  h, qk, v = model.hidden, model.linear_qk_width, model.linear_v_width
  stored = (2 * h + 2 * (2 * qk + 2 * v + 2 * model.linear_v_heads) + 2 * (2 * qk + v)
            + 4 * v + h)
  return stored / h


def attention_activation_units(model: ModelSpec) -> float:
  """Mean stored attention activations per layer and token, in units of ``h``.

  Softmax layers (full, sliding, sparse) store Korthikanti's 11 ``h`` with
  FlashAttention; linear layers :func:`linear_activation_units`, Mamba-2
  layers :func:`mamba.activation_units`, blocks without a mixer none.
  """
  n_linear = model.n_layers_of("linear_attention")
  n_mamba = model.n_layers_of("mamba")
  if not (n_linear or n_mamba or model.n_layers_of("mlp_only")):
    return ATTENTION_ACTIVATION_UNITS
  units = model.n_softmax_layers * ATTENTION_ACTIVATION_UNITS
  if n_linear:
    units += n_linear * linear_activation_units(model)
  if n_mamba:
    units += n_mamba * mamba.activation_units(model)
  return units / model.n_layers
