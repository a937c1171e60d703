"""Rollout generation on vLLM/SGLang-style engines: prefill, decode, long tail.

Each of ``R = pool_gpus / (tp * pp)`` engine replicas receives ``N / R``
sequences. Concurrency per engine is limited by the KV cache (what the memory
fraction leaves after weights and workspace), by ``max_seqs`` and by the
sequences it holds. Decode advances all running sequences one token per step;
a step reads the (touched) weights and every running sequence's KV cache and
does ``2 * active params`` FLOPs per token, so its GEMMs are memory bound
until the batch passes the ridge point; the attention kernel, run between
them, streams the KV cache in its own time (:func:`decode_round`); plus two
TP all-reduces per layer (small messages: latency bound) and the engine's
per-step overhead.

The long tail: responses come as K equal-mass length bins (``ResponseLength``).
While bin k decodes, only the bins >= k are alive, so the batch shrinks as
sequences finish and the last ones run at poor efficiency. When the KV cache
holds fewer than all sequences (continuous batching), a queue phase at full
concurrency precedes the tail.

The stage ends with the slowest replica, when the longest of all ``N``
requests ends (:func:`slowest_replica_longest`): the top bin holds 1/K of the
requests, so some request reaches it with probability ``1 - (1 - 1/K)^N``.
Each replica's tail runs at its own small batch, where a step costs the
weight read plus the engine's per-step overhead (:func:`step_overhead_s`),
so more replicas at a fixed batch stop helping once the per-replica tail
(longest request x small-batch step) dominates: veRL issue #658 reports
per-worker rollout times of 73, 119 and 167 s tracking each worker's longest
response (3,768, 6,233, 8,412 tokens; ~19-20 ms per token), not its total
tokens.

With PP, ``pp`` micro-batches of ``B / pp`` sequences fill the pipeline; a
round (every sequence advances one token) takes ``pp`` stage passes, each
reading the stage's weights again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src import pytree
from costmodel._src.ops import collectives
from costmodel._src.ops import layers
from costmodel._src.ops import roofline
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import layout as layout_lib
from costmodel._src.specs import mixers
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import kv_state
from costmodel._src.stages import speculative

# The engine's memory besides weights and KV cache, when its token budget is
# not given (``Engine.max_batched_tokens`` None): activations, sampler buffers.
WORKSPACE_BYTES = 2.0 * 2**30
ACTIVATION_BYTES = 2.0  # BF16 activations of the profile run
LOGIT_BYTES = 4.0  # the sampler's float32 logits and probabilities, one buffer each
LOGIT_BUFFERS = 2.0


def workspace_bytes(model: ModelSpec, engine: Engine):
  """Per-GPU engine memory besides weights and KV cache: the peak of vLLM's profile run.

  vLLM gives the KV cache ``gpu_memory_utilization x total memory`` minus the
  peak of a profile run: the weights, the activations of one forward pass over
  ``max_num_batched_tokens`` tokens, and the sampler's logits of
  ``min(max_num_seqs, max_num_batched_tokens)`` requests; CUDA graphs are
  captured after the KV cache is allocated, outside that budget
  (vllm-project/vllm@0012cf691b7e69423244d2b1405f4b6832156e19
  ``vllm/v1/worker/gpu_worker.py``: ``determine_available_memory``,
  ``compile_or_warm_up_model``). One layer's live activations per token: the
  MLP's gate and up outputs and its activated output (sharded by TP), the
  attention's q, k, v and output, and two hidden-size buffers (residual and
  normed input). Allocations outside torch (NCCL, cuBLAS) are left out.
  Without ``engine.max_batched_tokens`` the fixed :data:`WORKSPACE_BYTES`.
  """
  tokens = engine.max_batched_tokens
  if tokens is None:
    return jnp.asarray(WORKSPACE_BYTES)
  mlp = (3.0 if model.gated_mlp else 2.0) * model.ffn_hidden
  attn = (2.0 * model.n_heads + 2.0 * model.n_kv_heads) * model.head_dim
  per_token = (mlp + attn) / engine.tp + 2.0 * model.hidden
  rows = jnp.minimum(engine.max_seqs, float(tokens))
  return (float(tokens) * per_token * ACTIVATION_BYTES
          + rows * model.vocab * LOGIT_BYTES * LOGIT_BUFFERS)


def dp_attention_select(engine: Engine, on: Callable[[], Any], off: Callable[[], Any]):
  """``on()`` where ``engine`` runs DP-attention, ``off()`` where it does not.

  A concrete flag (a plan's number) builds only its own branch; a traced one
  (a searched plan) selects between both, leaf by leaf.
  """
  flag = engine.dp_attention
  if pytree.is_concrete(flag) and np.ndim(flag) == 0:
    return on() if float(flag) > 0.5 else off()

  def pick(a, b):
    if isinstance(a, (bool, int, float, str)) and type(a) is type(b) and a == b:
      return a  # a fact both branches share (a count, a flag) stays a Python value
    return jnp.where(jnp.asarray(flag) > 0.5, a, b)

  return jax.tree.map(pick, on(), off())


def kv_bytes_per_token_per_gpu(model: ModelSpec, engine: Engine, kv_bytes: float):
  """KV bytes one GPU of an engine stores per token the engine holds.

  GQA heads split over TP while ``n_kv_heads >= tp`` and are replicated past
  it; MLA's compressed latent is replicated on every TP rank. With
  DP-attention each GPU holds only its own sequences' KV: the engine's
  tokens spread over its ``tp`` GPUs.
  """
  def off():
    kv_tp = 1.0 if model.is_mla else smooth.smin(engine.tp, float(model.n_kv_heads))
    return model.kv_bytes_per_token(kv_bytes) / (kv_tp * engine.pp)

  return dp_attention_select(
      engine, lambda: model.kv_bytes_per_token(kv_bytes) / (engine.tp * engine.pp), off)


def engine_weight_bytes(model: ModelSpec, engine: Engine, param_bytes: float):
  """Weight bytes per GPU of one engine (DP-attention: all but the experts whole)."""
  def on():
    expert = float(model.expert_params_total)
    dense = float(model.total_params) - expert
    return (dense + expert / engine.tp) * param_bytes / engine.pp

  return dp_attention_select(
      engine, on, lambda: float(model.total_params) * param_bytes / (engine.tp * engine.pp))


def engine_bytes(job: RLJob, engine: Engine):
  """Bytes per weight and per KV element of the engine (its :class:`Precision`)."""
  return (precision_lib.weight_bytes(engine.precision, job.param_bytes),
          precision_lib.kv_bytes(engine.precision, job.kv_bytes))


def _engine_work(model, engine, tokens, ctx, param_bytes, lm_head, pp):
  """Forward work of one engine GPU: TP-split, or DP-attention with wide EP."""
  return dp_attention_select(
      engine,
      lambda: (layers.forward_work(model, tokens / engine.tp, ctx, tp=1.0, pp=pp, ep=engine.tp,
                                   param_bytes=param_bytes, lm_head=lm_head), engine.tp),
      lambda: (layers.forward_work(model, tokens, ctx, tp=engine.tp, pp=pp, ep=engine.ep,
                                   param_bytes=param_bytes, lm_head=lm_head), engine.ep))


def decode_round(model, job, engine, cluster, eff, batch, ctx, tau=0.0, tokens_per_seq=1.0):
  """One decode round (all ``batch`` sequences advance one token) of an engine.

  ``tokens_per_seq`` > 1 is a speculative verify pass: that many tokens per
  sequence through the GEMMs and attention, the KV cache read once.

  Returns:
    (compute_s, memory_s, comm_s) of the round, without the engine's
    per-step overhead.
  """
  hw = cluster.accelerator
  tp, pp = engine.tp, engine.pp
  mb = batch / pp
  param_bytes, kv_b = engine_bytes(job, engine)
  w, ep = _engine_work(model, engine, mb * tokens_per_seq, ctx, param_bytes, True, pp)
  kv_read = mb * kv_state.kv_read_bytes_per_gpu(model, engine, kv_b, ctx)
  attn_s = roofline.compute_time(w.attention_flops, w.rows, hw, eff)
  # The attention kernel and the weight GEMMs run one after the other, each
  # bound by its own resource: a decode layer launches the QKV GEMM, the
  # paged-attention kernel over the KV cache, then the output and MLP GEMMs
  # (vllm-project/vllm ``vllm/model_executor/models/llama.py``
  # ``LlamaAttention.forward``: ``qkv_proj``, ``attn``, ``o_proj``). At a large
  # batch the GEMMs are compute bound while attention streams the KV cache,
  # and the two times add; one roofline over their sum would hide the KV reads.
  rf = common.gemm_roofline(w, hw, eff, 1.0, tau, dtype=engine.precision.compute,
                            extra_bytes=w.activation_bytes)
  ra = roofline.roofline(None, kv_read, None, hw, eff, n_ops=w.layers, tau=tau,
                         compute_s=attn_s)
  rf = roofline.RooflineTime(*(a + b for a, b in zip(rf, ra, strict=True)))
  domain = cluster.scaleup_domain
  comm = w.tp_collectives * collectives.collective_time("all_reduce", w.tp_bytes, tp, domain,
                                                        hw, eff, tau)
  comm = comm + common.ep_time(w, cluster, eff, ep, tau)
  handoff = collectives.collective_time("p2p", w.tp_bytes, jnp.where(pp > 1, 2.0, 1.0),
                                        jnp.where(tp * pp > domain, 1.0, 2.0), hw, eff)
  comm = comm + (pp - 1.0) / pp * handoff
  return rf.compute_s * pp, rf.memory_s * pp, comm * pp


def step_overhead_s(model: ModelSpec, engine: Engine, cluster: Cluster, eff: Efficiency,
                    batch):
  """Engine overhead of one decode step at ``batch`` running sequences.

  What the GPU does not do but the step waits for: the scheduler and input
  preparation (``decode_step_overhead_s``), per-sequence sampling,
  detokenisation and block-table updates (``decode_seq_overhead_s`` per
  running sequence), the step's broadcast to every other worker of the
  engine (``decode_rank_overhead_s`` per extra GPU), eager-mode kernel
  launches (``eager_layer_overhead_s`` per layer without CUDA graphs) and a
  cross-node RPC when the engine spans scale-up domains
  (``cross_node_step_overhead_s``, in full once the engine spans two
  domains). vLLM's profile of Llama-3-8B on one H100 (v0.5.3, blog
  2024-09-05 "vLLM v0.6.0: 2.7x Throughput Improvement") spent 29% of the
  time scheduling and 38% on the GPU.

  With speculative decoding a step samples ``k + 1`` positions of every
  sequence (the target's verify logits: vLLM's ``RejectionSampler``,
  ``vllm/v1/sample/rejection_sampler.py``, over the draft tokens and the
  bonus token), so the per-sequence part is paid that many times per step;
  the per-step part once per step.
  """
  ranks = engine.tp * engine.pp
  spans = jnp.clip(ranks / cluster.scaleup_domain - 1.0, 0.0, 1.0)
  eager = 0.0 if engine.cuda_graphs else float(model.n_layers)
  spec = engine.speculative
  positions = 1.0 if spec is None else 1.0 + jnp.asarray(spec.draft_tokens, float)
  return (eff.decode_step_overhead_s + eff.decode_seq_overhead_s * batch * positions
          + eff.decode_rank_overhead_s * (ranks - 1.0) + eff.eager_layer_overhead_s * eager
          + eff.cross_node_step_overhead_s * spans)


slowest_replica_longest = infer_lib.expected_longest
"""Expected longest of ``n_requests`` responses: where the slowest replica ends
(:func:`costmodel._src.stages.infer.expected_longest`)."""


def prefill(model, job, engine, cluster, eff, tokens, prompt, tau=0.0):
  """Prefill of ``tokens`` prompt tokens (prompts of length ``prompt``) on one engine.

  Chunked prefill in chunks of 8,192 tokens; causal attention over the prompt.

  Returns:
    (RooflineTime of the GEMMs and attention, TP and EP communication seconds).
  """
  hw = cluster.accelerator
  param_bytes, _ = engine_bytes(job, engine)
  chunks = jnp.maximum(tokens / 8192.0, 1.0)
  pw, ep = _engine_work(model, engine, tokens / chunks, 0.5 * prompt, param_bytes, False, 1.0)
  attn_s = roofline.compute_time(pw.attention_flops, pw.rows, hw, eff)
  pr = common.gemm_roofline(pw, hw, eff, 1.0, tau, dtype=engine.precision.compute,
                            extra_compute_s=attn_s, extra_bytes=pw.activation_bytes)
  pr = roofline.RooflineTime(*(chunks * x for x in pr))
  comm = pw.tp_collectives * collectives.collective_time(
      "all_reduce", pw.tp_bytes, engine.tp, cluster.scaleup_domain, hw, eff, tau)
  comm = chunks * (comm + common.ep_time(pw, cluster, eff, ep, tau))
  return pr, comm


def generate(model: ModelSpec, job: RLJob, engine: Engine, pool_gpus, cluster: Cluster,
             eff: Efficiency, tau=0.0, samples=None, controller: bool = True
             ) -> common.StageCost:
  """Cost of generating one step's responses on ``pool_gpus`` GPUs.

  Args:
    model: The policy.
    job: The RL job (prompt length, response-length bins, sample count).
    engine: Engine layout (replicas fill the pool).
    pool_gpus: GPUs of the rollout pool.
    cluster: The cluster.
    eff: Efficiency parameters.
    tau: Smoothing temperature (0 = exact).
    samples: Sequences to generate (default: the job's generated samples).
    controller: The rollouts go back through a single controller (the
      hand-off of :func:`infer.batch_transfer_s` in the overhead).

  Returns:
    A :class:`StageCost`. ``extras`` holds ``replicas``, ``concurrency``
    (peak running sequences per engine), ``mean_concurrency``,
    ``decode_tokens_per_s`` (per engine), ``tail_share`` (share of decode
    time spent with fewer than half the peak sequences running),
    ``steady_time_s`` (the stage without its tail: what partial rollouts
    approach), ``kv_tokens`` (KV capacity per engine), ``limit_bytes`` (the
    engine's memory budget per GPU) and ``min_kv_bytes``.
  """
  hw = cluster.accelerator
  n_seq = job.generated_samples_per_step if samples is None else jnp.asarray(samples, float)
  replicas = pool_gpus / (engine.tp * engine.pp)
  n_r = n_seq / replicas
  knots = jnp.asarray(job.response.knots, float)
  k_bins = knots.shape[-1]
  mean_resp = jnp.mean(knots)
  cap_resp = knots[-1]
  max_resp = slowest_replica_longest(knots, n_seq)
  prompt = jnp.asarray(job.prompt_len, float)

  # Memory and concurrency.
  param_b, kv_b = engine_bytes(job, engine)
  weights = (engine_weight_bytes(model, engine, param_b)
             + speculative.draft_weight_bytes_per_gpu(model, engine, param_b))
  kv_tok = kv_bytes_per_token_per_gpu(model, engine, kv_b)
  if engine.memory_fraction is None:  # outside a plan: assume a shared pool
    engine = layout_lib.resolve_memory_fraction(engine, shared=True)
  limit = engine.memory_fraction * hw.hbm_bytes
  workspace = workspace_bytes(model, engine)
  kv_budget = smooth.relu(limit - weights - workspace, hw.hbm_bytes, tau)
  kv_tokens = kv_budget / kv_tok
  second_moment = jnp.mean(knots**2)
  ctx_running = prompt + 0.5 * second_moment / mean_resp  # length-biased
  c_kv = kv_budget / kv_state.seq_cache_bytes_per_gpu(model, engine, kv_b, prompt + mean_resp)
  conc = smooth.smin(smooth.smin(engine.max_seqs, n_r, tau), c_kv, tau)
  conc = jnp.maximum(conc, 1e-3)

  # Tail: bins alive (K-k)/K while bin k decodes, k = 0..K-1.
  alive = (k_bins - jnp.arange(k_bins, dtype=float)) / k_bins
  ends = knots.at[-1].set(max_resp)  # the slowest replica's longest request
  prev = jnp.concatenate([jnp.zeros((1,)), ends[:-1]])
  delta = ends - prev
  ctx = prompt + 0.5 * (ends + prev)
  batch = conc * alive
  (c_s, m_s, x_s), per_step = speculative.decode_round(
      decode_round, model, job, engine, cluster, eff, batch, ctx, tau)
  over = step_overhead_s(model, engine, cluster, eff, batch) / per_step
  tail_parts = (jnp.sum(delta * c_s), jnp.sum(delta * m_s), jnp.sum(delta * x_s),
                jnp.sum(delta * over))
  tail_mask = alive < 0.5
  tail_share_num = jnp.sum(jnp.where(tail_mask, delta * (c_s + m_s + x_s + over), 0.0))

  # Queue phase: the KV cache is full, concurrency stays at its peak.
  queue_steps = smooth.relu(n_r - conc, n_r, tau) * mean_resp / conc
  (qc, qm, qx), q_per_step = speculative.decode_round(
      decode_round, model, job, engine, cluster, eff, conc, ctx_running, tau)
  q_over = step_overhead_s(model, engine, cluster, eff, conc) / q_per_step
  queue_parts = (queue_steps * qc, queue_steps * qm, queue_steps * qx, queue_steps * q_over)

  # Prefill: compute bound, once per prompt with prefix caching.
  prefill_tokens = n_r * prompt / (job.samples_per_prompt if engine.prefix_caching else 1.0)
  pr, p_comm = prefill(model, job, engine, cluster, eff, prefill_tokens, prompt, tau)

  compute_s = tail_parts[0] + queue_parts[0] + pr.compute_s
  memory_s = tail_parts[1] + queue_parts[1] + pr.memory_s
  comm_s = tail_parts[2] + queue_parts[2] + p_comm
  transfer_s = infer_lib.batch_transfer_s(job, eff, n_seq) if controller else 0.0
  overhead_s = tail_parts[3] + queue_parts[3] + eff.generate_overhead_s + transfer_s
  decode_s = sum(tail_parts) + sum(queue_parts)
  tokens_r = n_r * mean_resp

  # Without the tail: every token decoded at peak concurrency.
  steady_steps = tokens_r / conc
  steady_s = (steady_steps * (qc + qm + qx + q_over) + pr.time_s + p_comm
              + eff.generate_overhead_s + transfer_s)

  # Work and depth.
  fwd_flops = model.forward_flops_per_token(ctx_running)
  total_flops = n_seq * (mean_resp * fwd_flops + prompt * model.forward_flops_per_token(
      0.5 * prompt))
  kv_stream = n_seq * mean_resp * mixers.kv_read_bytes(model, ctx_running, kv_b)
  work = smooth.smax(total_flops / (hw.peak_flops_per_s * hw.matmul_efficiency_max),
                     kv_stream / (hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency_max), tau)
  one, one_per_step = speculative.decode_round(
      decode_round, model, job, engine, cluster, eff, jnp.ones(()), prompt + 0.5 * max_resp, tau)
  depth = max_resp * (one[0] + one[1] + one[2] + step_overhead_s(
      model, engine, cluster, eff, jnp.ones(())) / one_per_step)

  # One request may reach the cap.
  min_kv = kv_state.seq_cache_bytes_per_gpu(model, engine, kv_b, prompt + cap_resp)
  memory = common.Memory.zeros()._replace(
      weights=weights, kv_cache=smooth.smax(kv_budget, min_kv, tau),
      workspace=workspace)
  return common.make_cost(
      compute_s, memory_s, comm_s, jnp.zeros(()), overhead_s, work, depth, total_flops,
      memory, replicas=replicas, concurrency=conc,
      mean_concurrency=tokens_r / jnp.maximum(queue_steps + max_resp, 1.0),
      decode_tokens_per_s=tokens_r / jnp.maximum(decode_s, 1e-9),
      tail_share=tail_share_num / jnp.maximum(decode_s, 1e-9),
      steady_time_s=steady_s, kv_tokens=kv_tokens, limit_bytes=limit,
      min_kv_bytes=min_kv, decode_s=decode_s, prefill_s=pr.time_s + p_comm)
