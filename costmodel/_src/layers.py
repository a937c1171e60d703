"""FLOPs and bytes of a forward pass of the whole model on one GPU.

Counts are per GPU under tensor (TP), sequence (SP), context (CP), pipeline
(PP) and expert (EP) parallelism, for ``tokens`` tokens held by the GPU's
data-parallel rank, each attending to ``context`` keys on average. Expert
matmuls are split over the TP group as well (ETP = TP). The backward pass costs
twice the forward FLOPs; callers scale.

References: Narayanan et al. SC'21 (FLOPs); Korthikanti et al. MLSys'23
(communication of TP and SP); Dao et al. 2022 (FlashAttention IO).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.model import ModelSpec


class ForwardWork(NamedTuple):
  """Work of one forward pass on one GPU (one pipeline stage's share).

  Attributes:
    matmul_flops: Weight GEMM FLOPs.
    attention_flops: Score and value FLOPs (attention core).
    weight_bytes: Weight bytes read (experts only when touched).
    activation_bytes: Bytes read and written by element-wise kernels.
    tp_bytes: Volume of one TP all-reduce (per layer, per direction), bytes.
    tp_collectives: Number of TP all-reduces (or RS+AG pairs) in the pass.
    ep_bytes: Per-rank send volume of one MoE all-to-all.
    ep_collectives: Number of MoE all-to-alls in the pass (dispatch+combine).
    cp_bytes: KV bytes one rank passes around the CP ring per layer.
    n_gemms: Number of separate weight GEMMs (sets their size).
    layers: Layers on this GPU's pipeline stage.
    rows: Rows of each weight GEMM (tokens on this GPU).
  """

  matmul_flops: jax.Array
  attention_flops: jax.Array
  weight_bytes: jax.Array
  activation_bytes: jax.Array
  tp_bytes: jax.Array
  tp_collectives: jax.Array
  ep_bytes: jax.Array
  ep_collectives: jax.Array
  cp_bytes: jax.Array
  n_gemms: jax.Array
  layers: jax.Array
  rows: jax.Array


def experts_touched_fraction(model: ModelSpec, routed_tokens) -> jax.Array:
  """Expected share of an MoE layer's experts that at least one token uses.

  With uniform routing of ``routed_tokens`` tokens to top-k of E experts:
  ``1 - (1 - k/E) ** tokens``, written as ``1 - exp(tokens * log1p(-k/E))``.
  """
  if not model.is_moe:
    return jnp.asarray(1.0)
  p = model.top_k / model.n_experts
  if p >= 1.0:
    return jnp.asarray(1.0)
  return -jnp.expm1(jnp.asarray(routed_tokens, float) * jnp.log1p(-p))


def forward_work(model: ModelSpec, tokens, context, tp=1.0, pp=1.0, cp=1.0, ep=1.0,
                 param_bytes: float = 2.0, act_bytes: float = 2.0,
                 lm_head: bool = True, sequence_parallel: bool = True,
                 flash_attention: bool = True) -> ForwardWork:
  """Forward work on one GPU for ``tokens`` tokens of its DP rank.

  Args:
    model: The architecture.
    tokens: Tokens processed by the DP rank (before CP splitting).
    context: Mean keys attended per query under the causal mask (s/2 for full
      sequences; the current length in decode). Without FlashAttention the
      full score matrix is computed (twice the causal work) and its softmax
      and dropout go through HBM.
    tp, pp, cp, ep: Parallel degrees (reals allowed).
    param_bytes: Bytes per weight.
    act_bytes: Bytes per activation element.
    lm_head: Whether the LM head (logits) is computed.
    sequence_parallel: Norms, dropout and residuals split over TP (else each
      TP rank repeats them).
    flash_attention: Fused attention core.

  Returns:
    A :class:`ForwardWork` for the GPU's pipeline stage (layers / pp).
  """
  tokens = jnp.asarray(tokens, float)
  t_loc = tokens / cp
  h = model.hidden
  layers_per_stage = model.n_layers / pp
  moe_share = model.n_moe_layers / model.n_layers
  # Weight GEMMs: the stage's share of the active layer weights, plus the LM
  # head, which sits whole on the last stage: the slowest stage sets the pace
  # of a pipeline, so the stage modelled is the last one.
  layer_active = float(model.layer_params(active=True))
  # LM head (vocab x embedding width, plus any projection to that width).
  head = float(model.matmul_params_per_token - layer_active) if lm_head else 0.0
  matmul = 2.0 * t_loc * (layer_active / pp + head) / tp
  score_ctx = context if flash_attention else 2.0 * context
  attn = model.attention_flops_per_token(score_ctx) * t_loc / (tp * pp)
  # Weights read once per pass: non-expert weights, plus the touched experts.
  dense_w = float(model.layer_params(active=True)
                  - model.n_moe_layers * model.top_k * model.expert_params())
  expert_w = float(model.expert_params_total)
  touched = experts_touched_fraction(model, tokens * ep)
  weight_bytes = param_bytes * (dense_w / (tp * pp) + touched * expert_w / (tp * pp * ep)
                                + head / tp)
  # Element-wise kernels (norms, residuals, dropout, bias, activation; the
  # unfused softmax): ~16 h elements per token per layer read or written, plus
  # 2-3 passes over the MLP intermediate, plus 6 passes over the scores.
  ffn_active = (model.n_dense_layers * model.ffn_hidden + model.n_moe_layers * (
      model.top_k * model.expert_ffn_hidden + model.shared_ffn_hidden)) / model.n_layers
  norm_split = tp if sequence_parallel else 1.0
  per_token = 16.0 * h / norm_split + (3.0 if model.gated_mlp else 2.0) * ffn_active / tp
  if not flash_attention:
    per_token = per_token + 6.0 * model.n_heads / tp * score_ctx
  act = act_bytes * t_loc * layers_per_stage * per_token
  act = act + (act_bytes * 2.0 * t_loc * model.vocab / tp if lm_head else 0.0)
  tp_bytes = act_bytes * t_loc * h
  tp_coll = jnp.where(tp > 1.0, 2.0 * layers_per_stage, 0.0)
  ep_bytes = act_bytes * t_loc * model.top_k * h if model.is_moe else jnp.zeros(())
  ep_coll = jnp.where(ep > 1.0, 2.0 * layers_per_stage * moe_share, 0.0)
  kv_width = (model.kv_lora_rank + model.qk_rope_head_dim) if model.is_mla else (
      2 * model.n_kv_heads * model.head_dim)
  cp_bytes = act_bytes * t_loc * kv_width / jnp.minimum(tp, float(max(model.n_kv_heads, 1)))
  mats = (4 if not model.is_mla else 6) + (3 if model.gated_mlp else 2)
  n_gemms = layers_per_stage * mats + (1.0 if lm_head else 0.0)
  return ForwardWork(matmul, attn, weight_bytes, act, tp_bytes, tp_coll, ep_bytes,
                     ep_coll, cp_bytes, jnp.asarray(n_gemms, float),
                     jnp.asarray(layers_per_stage, float), t_loc)


def activation_bytes_per_layer(model: ModelSpec, seq, micro_batch, tp, cp, recompute,
                               sequence_parallel: bool, flash_attention: bool):
  """Activation memory of one layer for one micro-batch (Korthikanti et al.).

  16-bit activations, 1-byte dropout masks:

  * none, TP without SP: ``s b h (10 + 24/t + 5 a s / (h t))``
  * none, TP with SP:    ``s b h (34 + 5 a s / h) / t``
  * selective (attention core recomputed): ``34 s b h / t`` (SP) or
    ``s b h (10 + 24/t)`` (no SP)
  * full: ``2 s b h`` (the layer input only)

  FlashAttention never stores the ``5 a s^2 b`` score term. CP divides s.
  The MLP share (19 of 34) scales with ``ffn / (4 h)``, times 1.5 for a gated
  (SwiGLU) MLP; MoE layers store the routed copies, ``ffn = top_k *
  expert_ffn + shared_ffn``.

  Args:
    recompute: 0 none, 1 selective, 2 full (may be a traced integer).
  """
  s = seq / cp
  sbh = s * micro_batch * model.hidden
  score = 0.0 if flash_attention else 5.0 * model.n_heads * s / model.hidden
  gate = 1.5 if model.gated_mlp else 1.0
  if model.is_moe:
    moe_ffn = model.top_k * model.expert_ffn_hidden + model.shared_ffn_hidden
    share = model.n_moe_layers / model.n_layers
    dense_ffn = model.ffn_hidden if model.n_dense_layers else moe_ffn
    ffn = share * moe_ffn + (1 - share) * dense_ffn
  else:
    ffn = model.ffn_hidden
  mlp_scale = gate * ffn / (4.0 * model.hidden)
  base = 15.0 + 19.0 * mlp_scale  # 11 attention + 4 norms, 19 MLP at ffn = 4h
  if sequence_parallel:
    none = sbh * (base + score) / tp
    selective = sbh * base / tp
  else:
    none = sbh * (10.0 + (base - 10.0) / tp + score / tp)
    selective = sbh * (10.0 + (base - 10.0) / tp)
  full = 2.0 * sbh / (tp if sequence_parallel else 1.0)
  r = jnp.asarray(recompute)
  return jnp.where(r >= 2, full, jnp.where(r >= 1, selective, none))
