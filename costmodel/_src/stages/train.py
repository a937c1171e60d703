"""Training stages: actor and critic updates.

Per step: ``epochs x mini_batches`` optimizer updates. Each update processes
its share of the samples on ``dp = pool_gpus / (tp * pp * cp)`` ranks in
micro-batches of ``micro_batch`` sequences:

* forward + backward = 3x forward FLOPs; recompute adds the attention core
  (selective) or a whole forward (full);
* per layer, 2 TP all-reduces (or RS + AG with SP) forward and 2 backward
  (+2 with full recompute); MoE all-to-alls likewise; the CP ring overlaps
  the attention core;
* pipeline: 1F1B bubble ``(pp - 1) / vpp`` stage passes per update, with
  ``m`` micro-batches: bubble share ``(p - 1) / (v m)``; activation hand-offs
  between stages;
* data parallel: gradients reduced over ``dp * cp`` ranks, 2 Psi bytes for
  ZeRO 0-2 (reduce-scatter + all-gather), 3 Psi for ZeRO-3 (parameters
  gathered in forward and backward), a share ``dp_overlap`` hidden behind the
  backward pass;
* optimizer step: memory bound over the local shard; with offload, gradients
  go to the host and parameters come back over the host link, the step runs
  on the CPU, and ZeRO-3 weight shards stream in for every pass.

Memory per GPU follows Rajbhandari et al. (ZeRO) and Korthikanti et al.
(activations; 1F1B keeps ``pp`` micro-batches in flight on the first stage).

References: Narayanan et al. SC'21; Korthikanti et al. MLSys'23;
Rajbhandari et al. SC'20.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import layers
from costmodel._src.ops import roofline
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common
from costmodel._src.stages import infer as infer_lib


def zero_memory(params, job: RLJob, zero_stage, dp, offload):
  """Weights, gradients and optimizer bytes per GPU for ``params`` local params.

  ZeRO-1 shards the optimizer state over ``dp``, ZeRO-2 also the gradients,
  ZeRO-3 also the weights (Rajbhandari et al., Table 1). Offload moves the
  optimizer state (and, at ZeRO-3, the weights) to the host.
  """
  z = jnp.asarray(zero_stage, float)
  weights = params * job.param_bytes / jnp.where(z >= 3, dp, 1.0)
  grads = params * job.grad_bytes / jnp.where(z >= 2, dp, 1.0)
  opt = params * job.optimizer_bytes / jnp.where(z >= 1, dp, 1.0)
  off = jnp.asarray(offload, float)
  return weights * (1.0 - off * (z >= 3)), grads, opt * (1.0 - off)


def dp_traffic_bytes(params, job: RLJob, zero_stage):
  """Data-parallel bytes per GPU per update (the buffer the collectives move).

  2 Psi for ZeRO 0-2 (gradient reduce-scatter + all-gather of updated
  weights, or one all-reduce), 3 Psi for ZeRO-3 (weights gathered in forward
  and backward, gradients reduce-scattered), in units of the gradient bytes.
  """
  base = params * job.grad_bytes
  return jnp.where(jnp.asarray(zero_stage) >= 3, 1.5, 1.0) * base


def optimizer_step_s(params, job: RLJob, hw, eff: Efficiency):
  """``(gpu_s, host_s)`` of one optimizer step over ``params`` local parameters.

  On the GPU the step is memory bound over the optimizer states (read and
  written), the weights and the gradients. Offloaded, the gradients go to the
  host and the weights come back over the host link, and the step runs on the
  CPU at ``Efficiency.cpu_optimizer_params_per_s``.
  """
  gpu_s = roofline.memory_time(
      params * (2.0 * job.optimizer_bytes + job.param_bytes + job.grad_bytes), hw, eff)
  host_bw = hw.host_bandwidth_bytes_per_s * eff.host_efficiency
  host_s = (params * (job.grad_bytes + job.param_bytes) / host_bw
            + params / eff.cpu_optimizer_params_per_s)
  return gpu_s, host_s


def fp8_cast_s(work, flop_multiplier, hw, eff: Efficiency, compute: str):
  """Per-tensor scaling casts of FP8 training (Transformer Engine style).

  Every GEMM's inputs are cast with an amax pass (:func:`precision.cast_bytes`):
  in each forward (``flop_multiplier - 2`` of them: 1, or 2 with full
  recompute) the activations (M x K of each GEMM) and the BF16 weights, in
  the backward the output gradients (M x N). Zero for BF16 compute.
  """
  if compute in ("bf16", "fp16"):
    return jnp.zeros(())
  gemms = work.dense_gemms + work.expert_gemms
  mk = sum(g.flops / (2.0 * g.n) for g in gemms)  # M x K elements, all GEMMs
  mn = sum(g.flops / (2.0 * g.k) for g in gemms)
  weights = work.weight_bytes / 2.0  # BF16 weights read: elements
  elems = (mk + weights) * (flop_multiplier - 2.0) + mn
  return roofline.memory_time(precision_lib.cast_bytes(elems, compute), hw, eff,
                              n_ops=work.n_gemms * flop_multiplier)


def longest_sequence_factor(model: ModelSpec, job: RLJob, layout: Parallel, cluster: Cluster,
                            eff: Efficiency, batch, rank_s, flop_mult, coll_mult, lm_head=True,
                            tau=0.0):
  """How much longer an update takes than its mean rank: the rank with the longest sequence.

  A sequence is never split over data-parallel ranks (veRL's dynamic batching
  and balancing move whole sequences; CP splits one over its ``cp`` GPUs,
  which are one rank here), so every update waits for the rank that holds the
  longest of its ``batch`` sequences (:func:`infer.expected_longest`): at
  least one pass over that sequence, its attention at its own length, however
  many ranks share the rest. Past the GPU count where a rank's mean share
  (``rank_s``, the pass time of its micro-batches) falls below that pass, more
  GPUs stop shortening the update: the training counterpart of generation's
  slowest replica.

  Returns:
    ``max(rank_s, longest pass) / rank_s`` (smooth for tau > 0), >= 1.
  """
  longest = jnp.asarray(job.prompt_len, float) + infer_lib.expected_longest(
      jnp.asarray(job.response.knots, float), batch)
  work = layers.forward_work(model, longest, 0.5 * longest, tp=layout.tp, pp=layout.pp,
                             cp=layout.cp, ep=layout.ep, param_bytes=job.param_bytes,
                             lm_head=lm_head, sequence_parallel=layout.sequence_parallel,
                             flash_attention=layout.flash_attention, etp=layout.etp)
  pt = common.pass_time(work, flop_mult, cluster, eff, layout.tp, layout.cp, layout.ep, tau,
                        collective_multiplier=coll_mult, compute_efficiency=eff.train_efficiency,
                        dtype=layout.precision.compute, ep_overlap=layout.ep_overlap)
  long_s = pt.compute_s + pt.memory_s + pt.comm_s
  return smooth.smax(rank_s, long_s, tau) / jnp.maximum(rank_s, 1e-12)


def train(model: ModelSpec, job: RLJob, layout: Parallel, pool_gpus, cluster: Cluster,
          eff: Efficiency, tau=0.0, samples=None, lm_head: bool = True,
          global_batch=None, seq_len=None, updates=None, calls=1.0,
          controller: bool = True) -> common.StageCost:
  """Cost of the training updates of one RL step.

  Args:
    model: The model trained (actor or critic).
    job: The RL job (samples, lengths, epochs, mini-batches, dtypes).
    layout: Layout on the pool.
    pool_gpus: GPUs of the pool.
    cluster: The cluster.
    eff: Efficiency parameters.
    tau: Smoothing temperature.
    samples: Samples per step (default: the job's).
    lm_head: False for a critic (value head).
    global_batch: Sequences per update (default: samples / mini_batches).
    seq_len: Tokens per sequence (default: prompt + mean response); set for
      pre-training style validation with fixed lengths.
    updates: Optimizer updates per step (default: epochs x mini_batches).
    calls: Calls into the trainer per step (each pays
      ``Efficiency.train_call_overhead_s``; none for pre-training style
      validation with ``seq_len`` set).
    controller: The batch arrives through a single controller and each call
      is a remote one; False (SPMD frameworks) drops both overheads.
  """
  hw = cluster.accelerator
  n = job.samples_per_step if samples is None else jnp.asarray(samples, float)
  n_updates = float(job.ppo_epochs * job.mini_batches) if updates is None else updates
  batch = n / job.mini_batches if global_batch is None else jnp.asarray(global_batch, float)
  mean_seq, max_seq = infer_lib.sequence_tokens(job)
  seq = mean_seq if seq_len is None else jnp.asarray(seq_len, float)
  # Peak tokens of a micro-batch: packed sequences of mean length, one of
  # which is the longest (dynamic batching / padding-free packing).
  seq_peak = (seq + (max_seq - seq) / jnp.maximum(layout.micro_batch, 1.0)
              if seq_len is None else seq)
  tp, pp, cp, ep = layout.tp, layout.pp, layout.cp, layout.ep
  dp = pool_gpus / (tp * pp * cp)
  per_rank = batch / dp
  m = smooth.ceil(per_rank / layout.micro_batch, tau)  # micro-batches per update
  mb = per_rank / m
  rc = jnp.asarray(layout.recompute, float)

  ctx = infer_lib.attention_context(job) if seq_len is None else 0.5 * seq
  work = layers.forward_work(model, mb * seq, ctx, tp=tp, pp=pp, cp=cp, ep=ep,
                             param_bytes=job.param_bytes, lm_head=lm_head,
                             sequence_parallel=layout.sequence_parallel,
                             flash_attention=layout.flash_attention, etp=layout.etp)
  flop_mult = 3.0 + jnp.where(rc >= 2, 1.0, 0.0)
  coll_mult = 2.0 + jnp.where(rc >= 2, 1.0, 0.0)
  pt = common.pass_time(work, flop_mult, cluster, eff, tp, cp, ep, tau,
                        collective_multiplier=coll_mult,
                        compute_efficiency=eff.train_efficiency,
                        dtype=layout.precision.compute, ep_overlap=layout.ep_overlap)
  pt = pt._replace(memory_s=pt.memory_s + fp8_cast_s(work, flop_mult, hw, eff,
                                                     layout.precision.compute))
  # Selective recompute re-runs the attention core forward.
  score_bytes = 0.0 if layout.flash_attention else (
      2.0 * mb * seq / cp * work.layers * 6.0 * model.n_heads / tp * seq)
  sel = jnp.where(rc == 1, roofline.compute_time(
      work.attention_flops, work.rows, hw, eff,
      eff.attention_efficiency * eff.train_efficiency)
                  + roofline.memory_time(score_bytes, hw, eff, work.layers), 0.0)
  stage_s = pt.compute_s + pt.memory_s + pt.comm_s + sel
  straggle = (longest_sequence_factor(model, job, layout, cluster, eff, batch, m * stage_s,
                                      flop_mult, coll_mult, lm_head, tau)
              if seq_len is None else 1.0)

  # Pipeline hand-offs: activations forward, gradients backward, per boundary;
  # each TP rank sends its 1/tp share (SP, or Megatron's scatter/gather).
  handoff_bytes = mb * seq / cp * model.hidden * 2.0 / tp
  crosses = tp * cp * pp > cluster.scaleup_domain
  p2p = collectives.collective_time("p2p", handoff_bytes, 2.0,
                                    jnp.where(crosses, 1.0, 2.0), hw, eff, tau)
  p2p_s = jnp.where(pp > 1.0, 2.0 * p2p * layout.vpp, 0.0)
  bubble = (pp - 1.0) / layout.vpp * (stage_s + p2p_s)

  # Data parallel (gradients over dp * cp ranks).
  shard = infer_lib.weight_shard(model, layout, dp)
  dp_group = dp * cp
  dp_bytes = dp_traffic_bytes(shard, job, layout.zero_stage)
  dp_s = collectives.collective_time("all_reduce", dp_bytes, dp_group,
                                     cluster.scaleup_domain, hw, eff, tau)
  dp_exposed = dp_s * (1.0 - eff.dp_overlap)

  # Optimizer: read/write states, weights and gradients of the local shard.
  z = jnp.asarray(layout.zero_stage, float)
  opt_params = shard / jnp.where(z >= 1, dp_group, 1.0)
  off = jnp.asarray(layout.offload, float)
  opt_gpu_s, opt_host_s = optimizer_step_s(opt_params, job, hw, eff)
  # Offload also streams (ZeRO-3) the weight shards in for every forward and
  # backward pass of every micro-batch.
  host_bw = hw.host_bandwidth_bytes_per_s * eff.host_efficiency
  passes = 2.0 + jnp.where(rc >= 2, 1.0, 0.0)
  param_stream_s = jnp.where(z >= 3, m * passes * shard / dp_group * job.param_bytes / host_bw,
                             0.0)
  per_update_compute = straggle * m * (pt.compute_s + sel)
  per_update_memory = straggle * m * pt.memory_s + (1.0 - off) * opt_gpu_s
  per_update_comm = (straggle * m * pt.comm_s + m * p2p_s + dp_exposed
                     + off * (opt_host_s + param_stream_s))
  compute_s = n_updates * per_update_compute
  memory_s = n_updates * per_update_memory
  comm_s = n_updates * per_update_comm
  bubble_s = n_updates * bubble
  overhead_s = n_updates * eff.train_overhead_s + (
      infer_lib.batch_transfer_s(job, eff, n) + calls * eff.train_call_overhead_s
      if seq_len is None and controller else 0.0)

  flops = n_updates * batch * seq * 3.0 * model.forward_flops_per_token(ctx)
  work_gpu_s = flops / (hw.peak_flops_per_s * hw.matmul_efficiency_max)
  depth_s = n_updates * (pp * stage_s + pp * p2p_s + (1.0 - off) * opt_gpu_s)

  # Memory per GPU.
  w_b, g_b, o_b = zero_memory(shard, job, layout.zero_stage, dp_group, layout.offload)
  act_layer = layers.activation_bytes_per_layer(model, seq_peak, mb, tp, cp, rc,
                                                layout.sequence_parallel,
                                                layout.flash_attention)
  # 1F1B holds pp micro-batches on the first stage; interleaving with v chunks
  # multiplies it by 1 + (p - 1) / (p v) (fits Korthikanti et al.'s 175B and
  # 530B memory rows).
  in_flight = smooth.smin(pp, m, tau) * jnp.where(
      layout.vpp > 1.0, 1.0 + (pp - 1.0) / (pp * layout.vpp), 1.0)
  layers_per_stage = model.n_layers / pp
  # Full recompute keeps the layer inputs plus one layer's full activations.
  full_extra = jnp.where(rc >= 2, layers.activation_bytes_per_layer(
      model, seq_peak, mb, tp, cp, 0.0, layout.sequence_parallel, layout.flash_attention), 0.0)
  activations = act_layer * layers_per_stage * in_flight + full_extra
  # Logits and their gradient (1.5x: the gradient overwrites in chunks).
  logits = (mb * seq_peak / cp * model.vocab * job.logits_bytes * 1.5 / tp
            if lm_head else jnp.zeros(()))
  memory = common.Memory.zeros()._replace(
      weights=w_b, gradients=g_b, optimizer=o_b, activations=activations, logits=logits,
      workspace=jnp.asarray(1.0 * 2**30))
  return common.make_cost(compute_s, memory_s, comm_s, bubble_s, overhead_s, work_gpu_s,
                          depth_s, flops, memory, micro_batches=m, dp=dp,
                          dp_comm_s=n_updates * dp_s, bubble_fraction=bubble / jnp.maximum(
                              m * stage_s, 1e-12), per_update_s=(
                                  per_update_compute + per_update_memory + per_update_comm
                                  + bubble + eff.train_overhead_s))
