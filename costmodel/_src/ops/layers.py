"""FLOPs and bytes of a forward pass of the whole model on one GPU.

Counts are per GPU under tensor (TP), sequence (SP), context (CP), pipeline
(PP), expert (EP) and expert-tensor (ETP) parallelism, for ``tokens`` tokens
held by the GPU's data-parallel rank, each attending to ``context`` keys on
average. The backward pass costs twice the forward FLOPs; callers scale.

GEMMs are listed by shape (:class:`Gemm`): the attention projections, the
dense and shared-expert MLPs and the LM head run on all the rank's tokens;
a routed expert runs on the tokens it receives,

    M_expert = tokens * top_k * ep * etp / (tp * n_experts)

(the EP group gathers ``ep * etp / tp`` ranks' tokens, SP-split over TP, and
each of its ranks holds ``n_experts / ep`` experts split ``etp`` ways), so
more, smaller experts at the same active parameters run shorter GEMMs. With
``ep = 1`` the experts are TP-split (``etp = tp``), as Megatron does when no
expert degree is set.

References: Narayanan et al. SC'21 (FLOPs); Korthikanti et al. MLSys'23
(communication of TP and SP); Dao et al. 2022 (FlashAttention IO).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.specs import mamba
from costmodel._src.specs import mixers
from costmodel._src.specs.model import ModelSpec


class Gemm(NamedTuple):
  """GEMMs of one shape: total FLOPs on the GPU, and M, N, K of each."""

  flops: jax.Array
  rows: jax.Array
  n: jax.Array
  k: jax.Array


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
    cp_bytes: Bytes one rank passes around the CP ring per layer (the mean
      layer: KV of attention, Mamba-2's all-to-all share).
    n_gemms: Number of separate weight GEMMs (sets their size).
    layers: Layers on this GPU's pipeline stage.
    rows: Rows of each weight GEMM (tokens on this GPU).
    dense_gemms: Non-expert GEMMs by shape (their FLOPs sum with the
      experts' to ``matmul_flops``).
    expert_gemms: Routed-expert GEMMs by shape, M = tokens per expert.
    expert_weight_bytes: Share of ``weight_bytes`` read by the experts.
    n_expert_gemms: Number of grouped expert GEMMs in the pass.
    etp_bytes: Volume of one expert-TP all-reduce (routed copies), bytes.
    etp_collectives: Expert-TP all-reduces in the pass (ETP > 1 with EP).
    etp: Expert-TP degree in force (:func:`effective_etp`).
    moe_layers: MoE layers on this GPU's pipeline stage.
    top_k: Experts per token (0 for a dense model).
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
  dense_gemms: tuple = ()
  expert_gemms: tuple = ()
  expert_weight_bytes: jax.Array | float = 0.0
  n_expert_gemms: jax.Array | float = 0.0
  etp_bytes: jax.Array | float = 0.0
  etp_collectives: jax.Array | float = 0.0
  etp: jax.Array | float = 1.0
  moe_layers: jax.Array | float = 0.0
  top_k: int = 0


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


def effective_etp(tp, ep, etp):
  """Expert-TP degree in force: ``etp`` with EP, ``tp`` without it."""
  return jnp.where(jnp.asarray(ep, float) > 1.0, jnp.asarray(etp, float),
                   jnp.asarray(tp, float))


def expert_rows(model: ModelSpec, tokens, tp=1.0, ep=1.0, etp=1.0) -> jax.Array:
  """Mean tokens one routed expert receives: ``tokens k ep etp / (tp E)``.

  ``tokens`` are the rank's (after CP splitting); ``etp`` is the degree in
  force (:func:`effective_etp`).
  """
  if not model.is_moe:
    return jnp.zeros(())
  return jnp.asarray(tokens, float) * model.top_k * ep * etp / (tp * model.n_experts)


def _gemms(model: ModelSpec, t_loc, tp, pp, etp, ep, lm_head: bool, touched=1.0):
  """Dense and expert GEMMs of one stage's forward, by shape.

  An expert GEMM runs only for the experts that receive tokens: its rows are
  the tokens per *touched* expert (at least one token when few are routed).
  """
  h = float(model.hidden)
  mlp_in = 2.0 if model.gated_mlp else 1.0
  n_l = model.n_layers / pp
  moe_l = model.n_moe_layers / pp
  # Token mixers by kind, as a mean layer: output projection and the rest.
  n_lin = model.n_layers_of("linear_attention")
  o_params = float(model.n_softmax_layers * model.n_heads * model.value_head_dim
                   + n_lin * model.linear_v_width
                   + model.n_layers_of("mamba") * mamba.inner(model)) * h / model.n_layers
  attn_in = float(model.mixer_params()) / model.n_layers - o_params
  dense = []
  # Attention: QKV (or MLA's down/up projections) then the output projection.
  # Norms and the router ride with the QKV GEMM (their FLOPs are tiny).
  other = float(model.layer_params(active=True)) - model.n_layers * (
      attn_in + o_params) - model.n_dense_layers * model.dense_mlp_params() - (
          model.n_moe_layers * (model.top_k * model.expert_params() + (
              model._mlp_params(model.shared_ffn_hidden) if model.shared_ffn_hidden else 0)))
  dense.append(Gemm(2.0 * t_loc * (n_l * attn_in + other / pp) / tp, t_loc,
                    attn_in / h / tp, jnp.asarray(h)))
  dense.append(Gemm(2.0 * t_loc * n_l * o_params / tp, t_loc, jnp.asarray(h),
                    o_params / h / tp))
  for n_layers, ffn in ((model.n_dense_layers, model.ffn_hidden),
                        (model.n_moe_layers, model.shared_ffn_hidden)):
    count = n_layers / pp
    if n_layers and ffn:
      p = float(model._mlp_params(ffn))
      dense.append(Gemm(2.0 * t_loc * count * p * mlp_in / (mlp_in + 1) / tp, t_loc,
                        mlp_in * ffn / tp, jnp.asarray(h)))
      dense.append(Gemm(2.0 * t_loc * count * p / (mlp_in + 1) / tp, t_loc, jnp.asarray(h),
                        ffn / tp))
  if lm_head:
    head = float(model.matmul_params_per_token - model.layer_params(active=True))
    dense.append(Gemm(2.0 * t_loc * head / tp, t_loc, model.vocab / tp,
                      jnp.asarray(float(model.token_embed_dim))))
  experts = []
  if model.is_moe and model.n_moe_layers:
    m_e = expert_rows(model, t_loc, tp, ep, etp) / touched
    p = float(model.top_k * model.expert_params())
    f = float(model.expert_ffn_hidden)
    w = jnp.asarray(float(model.expert_width))
    experts.append(Gemm(2.0 * t_loc * moe_l * p * mlp_in / (mlp_in + 1) / tp, m_e,
                        mlp_in * f / etp, w))
    experts.append(Gemm(2.0 * t_loc * moe_l * p / (mlp_in + 1) / tp, m_e, w, f / etp))
  return tuple(dense), tuple(experts)


def forward_work(model: ModelSpec, tokens, context, tp=1.0, pp=1.0, cp=1.0, ep=1.0,
                 param_bytes: float = 2.0, act_bytes: float = 2.0,
                 lm_head: bool = True, sequence_parallel: bool = True,
                 flash_attention: bool = True, etp=1.0) -> ForwardWork:
  """Forward work on one GPU for ``tokens`` tokens of its DP rank.

  Args:
    model: The architecture.
    tokens: Tokens processed by the DP rank (before CP splitting).
    context: Mean keys attended per query under the causal mask (s/2 for full
      sequences; the current length in decode). Without FlashAttention the
      full score matrix is computed (twice the causal work) and its softmax
      and dropout go through HBM.
    tp, pp, cp, ep: Parallel degrees (reals allowed).
    etp: Expert-TP degree with EP (ignored without EP: experts follow TP).
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
  etp = effective_etp(tp, ep, etp)
  expert_bytes = param_bytes * touched * expert_w / (etp * pp * ep)
  weight_bytes = param_bytes * (dense_w / (tp * pp) + head / tp) + expert_bytes
  # Element-wise kernels (norms, residuals, dropout, bias, activation; the
  # unfused softmax): ~16 h elements per token per layer read or written, plus
  # 2-3 passes over the MLP intermediate, plus 6 passes over the scores.
  ffn_active = (model.n_dense_layers * model.ffn_hidden + model.n_moe_layers * (
      model.top_k * model.expert_ffn_hidden + model.shared_ffn_hidden)) / model.n_layers
  norm_split = tp if sequence_parallel else 1.0
  # 8 h per residual branch (two per layer; one in Nemotron-H's single-branch blocks).
  branches = model.n_sublayers / model.n_layers
  per_token = 8.0 * branches * h / norm_split + (3.0 if model.gated_mlp else 2.0) * (
      ffn_active / tp)
  # MoE layers permute the routed copies into expert order and back
  # (dispatch and combine): read and write k copies of the expert width each way.
  w_e = model.expert_width
  per_token = per_token + moe_share * 4.0 * model.top_k * w_e / norm_split
  if not flash_attention:
    per_token = per_token + 6.0 * model.n_heads / tp * score_ctx
  act = act_bytes * t_loc * layers_per_stage * per_token
  act = act + (act_bytes * 2.0 * t_loc * model.vocab / tp if lm_head else 0.0)
  tp_bytes = act_bytes * t_loc * h
  # Two TP all-reduces per layer (attention, MLP); an MoE layer under EP
  # replaces the MLP's by the all-to-alls (and, with ETP > 1, an all-reduce
  # of the routed copies inside the expert-TP group).
  moe_ep = jnp.where(ep > 1.0, layers_per_stage * moe_share, 0.0)
  tp_coll = jnp.where(tp > 1.0, branches * layers_per_stage - moe_ep, 0.0)
  # All-to-all: each rank sends its tokens' routed copies (SP-split over TP).
  unique = t_loc / tp if sequence_parallel else t_loc
  ep_bytes = act_bytes * unique * model.top_k * w_e if model.is_moe else jnp.zeros(())
  ep_coll = 2.0 * moe_ep
  # Expert-TP: the routed copies this GPU's experts hold, reduced over ETP.
  etp_bytes = (act_bytes * expert_rows(model, t_loc, tp, ep, etp) * max(model.n_experts, 1) / ep
               * w_e)
  etp_coll = jnp.where(etp > 1.0, moe_ep, 0.0)
  kv_width = (model.kv_lora_rank + model.qk_rope_head_dim) if model.is_mla else (
      2 * model.n_kv_heads * model.head_dim)
  cp_bytes = act_bytes * t_loc * kv_width / jnp.minimum(tp, float(max(model.n_kv_heads, 1)))
  n_mamba = model.n_layers_of("mamba")
  if n_mamba or model.n_layers_of("mlp_only"):
    # Mean over the layers: attention layers pass their KV around the ring;
    # a Mamba-2 layer swaps sequence and head shards by all-to-all before its
    # scan (in_proj's z, x, B, C, dt) and back after it (y), Megatron-Core's
    # MambaContextParallel: (cp - 1) / cp of that width, whose (cp - 1) the
    # ring's time applies; a block without a mixer passes nothing.
    width = 2 * mamba.inner(model) + mamba.conv_channels(model) + model.mamba_heads
    a2a = act_bytes * t_loc * width / (tp * cp)
    n_attn = model.n_layers - n_mamba - model.n_layers_of("mlp_only")
    cp_bytes = (n_attn * cp_bytes + n_mamba * a2a) / model.n_layers
  attn_mats = 4 if not model.is_mla else 6
  # Mean GEMMs per layer: a Mamba-2 mixer runs two (in_proj, out_proj), a
  # block without a mixer none, a block without an MLP no MLP GEMMs.
  mixer_mats = (model.n_layers * attn_mats - model.n_layers_of("mamba") * (attn_mats - 2)
                - model.n_layers_of("mlp_only") * attn_mats) / model.n_layers
  mats = mixer_mats + (3 if model.gated_mlp else 2) * model.n_mlp_layers / model.n_layers
  n_gemms = layers_per_stage * mats + (1.0 if lm_head else 0.0)
  dense_g, expert_g = _gemms(model, t_loc, tp, pp, etp, ep, lm_head, touched)
  n_expert = 2.0 * model.n_moe_layers / pp
  return ForwardWork(matmul, attn, weight_bytes, act, tp_bytes, tp_coll, ep_bytes,
                     ep_coll, cp_bytes, jnp.asarray(n_gemms, float),
                     jnp.asarray(layers_per_stage, float), t_loc, dense_g, expert_g,
                     expert_bytes, jnp.asarray(n_expert, float), etp_bytes, etp_coll, etp,
                     jnp.asarray(model.n_moe_layers / pp, float), model.top_k)


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
  # Mean over the layers; a layer without an MLP (Nemotron-H's mixer-only
  # blocks) stores none, one without a mixer no attention activations.
  moe_ffn = model.top_k * model.expert_ffn_hidden + model.shared_ffn_hidden
  ffn = (model.n_moe_layers * moe_ffn + model.n_dense_layers * model.ffn_hidden) / model.n_layers
  mlp_scale = gate * ffn / (4.0 * model.hidden)
  # 11 attention (by kind: mixers.attention_activation_units) + 2 per norm, 19 MLP at ffn = 4h.
  norms = 2.0 * model.n_sublayers / model.n_layers
  base = mixers.attention_activation_units(model) + norms + 19.0 * mlp_scale
  if sequence_parallel:
    none = sbh * (base + score) / tp
    selective = sbh * base / tp
  else:
    none = sbh * (10.0 + (base - 10.0) / tp + score / tp)
    selective = sbh * (10.0 + (base - 10.0) / tp)
  full = 2.0 * sbh / (tp if sequence_parallel else 1.0)
  r = jnp.asarray(recompute)
  return jnp.where(r >= 2, full, jnp.where(r >= 1, selective, none))
