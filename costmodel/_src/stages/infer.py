"""Inference stages: reference and old log-probs, critic values, reward model.

A forward pass over every sample's prompt + response tokens, in micro-batches
of ``micro_batch`` sequences per GPU, on ``dp = pool_gpus / (tp * pp * cp)``
data-parallel ranks. With PP the micro-batches stream through the pipeline
(``m + pp - 1`` stage passes). With ZeRO-3/FSDP the weights are gathered once
per micro-batch. The logits (tokens x vocab, split over TP) are held for
the log-prob and count towards memory. The attention core sees the length
distribution's second moment (:func:`attention_context`); the batch's hand-off
from the controller (:func:`batch_transfer_s`) is in the overhead.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import layers
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common


def sequence_tokens(job: RLJob):
  """Mean tokens per sample (prompt + response) and the longest sample."""
  return (jnp.asarray(job.prompt_len, float) + job.response.mean,
          jnp.asarray(job.prompt_len, float) + job.response.max)


def attention_context(job: RLJob):
  """Mean causal attention context per token over the length distribution.

  A sample of ``s`` tokens costs ``~s^2 / 2`` in the attention core, so the
  per-token context is ``E[s^2] / (2 E[s])`` over the response bins, not
  ``E[s] / 2``: a heavy tail (DAPO's 28k maximum over a 1.7k mean) makes the
  core several times dearer than at the mean length.
  """
  s = jnp.asarray(job.prompt_len, float) + jnp.asarray(job.response.knots, float)
  return 0.5 * jnp.mean(s**2) / jnp.mean(s)


def expected_longest(knots, n_requests):
  """Expected longest of ``n_requests`` responses drawn from the bins ``knots``.

  Where the slowest engine replica ends, and how long the longest sequence of
  a training mini-batch is.

  The top bin (1/K of the requests, at the last knot) is reached with
  probability ``p = 1 - (1 - 1/K)^N``; otherwise the longest is the
  second-highest knot. Smooth in ``n_requests``.
  """
  k_bins = knots.shape[-1]
  if k_bins == 1:
    return knots[-1]
  p = 1.0 - jnp.exp(jnp.asarray(n_requests, float) * jnp.log1p(-1.0 / k_bins))
  return knots[-2] + p * (knots[-1] - knots[-2])


# Bytes per padded response token a pass returns to a single controller: the
# old log-prob pass returns ``old_log_probs`` and ``entropys`` in fp32
# (``compute_log_prob`` of verl/workers/fsdp_workers.py @b178a3c); the reference
# pass ``ref_log_prob``, a value or reward pass one fp32 (``compute_ref_log_prob``,
# ``compute_values``).
LOG_PROB_RETURN_BYTES = 8.0
ONE_OUTPUT_RETURN_BYTES = 4.0


def returned_outputs_s(job: RLJob, eff: Efficiency, samples=None,
                       bytes_per_token=LOG_PROB_RETURN_BYTES):
  """The controller taking back a pass's per-token outputs, padded.

  A single controller receives each pass's per-token outputs padded to
  ``[samples, max response]`` and deserialises, concatenates and reduces
  them in one process (``Efficiency.controller_return_bytes_per_s``): a cost
  per padded response token, whatever the GPUs.
  """
  n = job.samples_per_step if samples is None else jnp.asarray(samples, float)
  return n * job.response.max * bytes_per_token / eff.controller_return_bytes_per_s


def batch_transfer_s(job: RLJob, eff: Efficiency, samples=None):
  """Hand-off of one step's batch between roles through the controller.

  veRL's single controller moves a ``DataProto`` padded to the maximum
  prompt + response length (token ids, attention mask, position ids, and
  the per-token results) through the Ray object store at every stage
  boundary: the driver serialises it (``DataProto.__getstate__``:
  ``consolidate``, then ``torch.save`` into a buffer; ``verl/protocol.py``
  @b178a3c) and chunks it to the workers. The cost is per padded token,
  whatever the GPUs.
  """
  n = job.samples_per_step if samples is None else jnp.asarray(samples, float)
  padded = n * (jnp.asarray(job.prompt_len, float) + job.response.max)
  return padded * eff.batch_transfer_bytes_per_token / eff.batch_transfer_bytes_per_s


def weight_shard(model: ModelSpec, layout: Parallel, dp):
  """Parameters per GPU before ZeRO sharding.

  Dense weights split over TP x PP. Experts: with EP > 1 split over
  ``ep * etp`` ranks (``etp = 1``: each expert whole on its rank, EP ranks
  drawn from the TP, DP and CP ranks), so ``experts / (pp * ep * etp)``;
  with EP = 1 the experts are TP-split like the rest.
  """
  del dp
  expert = float(model.expert_params_total)
  dense = float(model.total_params) - expert
  etp = layers.effective_etp(layout.tp, layout.ep, layout.etp)
  return dense / (layout.tp * layout.pp) + expert / (etp * layout.pp * layout.ep)


def infer(model: ModelSpec, job: RLJob, layout: Parallel, pool_gpus, cluster: Cluster,
          eff: Efficiency, tau=0.0, samples=None, lm_head: bool = True,
          controller: bool = True, entropy: bool = True) -> common.StageCost:
  """Cost of one forward pass over the step's samples.

  Args:
    model: The model run (reference, actor, critic or reward model).
    job: The RL job.
    layout: Layout on the pool (dp is what remains of the pool).
    pool_gpus: GPUs of the pool.
    cluster: The cluster.
    eff: Efficiency parameters.
    tau: Smoothing temperature.
    samples: Samples to score (default: the job's samples per step).
    lm_head: False for value and reward heads (one output per token).
    controller: The batch arrives through a single controller and the
      per-token outputs go back to it (:func:`batch_transfer_s` and
      :func:`returned_outputs_s` in the overhead).
    entropy: The pass also returns the entropy (veRL's old log-prob pass;
      not the reference pass, nor a value or reward head).
  """
  hw = cluster.accelerator
  n = job.samples_per_step if samples is None else jnp.asarray(samples, float)
  dp = pool_gpus / (layout.tp * layout.pp * layout.cp)
  seq, seq_max = sequence_tokens(job)
  seq_peak = seq + (seq_max - seq) / jnp.maximum(layout.micro_batch, 1.0)
  per_rank = n / dp
  m = smooth.ceil(per_rank / layout.micro_batch, tau)  # micro-batches per rank
  mb_seqs = per_rank / m
  ctx = attention_context(job)
  param_bytes = precision_lib.weight_bytes(layout.precision, job.param_bytes)
  work = layers.forward_work(model, mb_seqs * seq, ctx, tp=layout.tp, pp=layout.pp,
                             cp=layout.cp, ep=layout.ep, param_bytes=param_bytes,
                             lm_head=lm_head, etp=layout.etp)
  pt = common.pass_time(work, 1.0, cluster, eff, layout.tp, layout.cp, layout.ep, tau,
                        dtype=layout.precision.compute, ep_overlap=layout.ep_overlap)
  stage_s = pt.compute_s + pt.memory_s + pt.comm_s
  # ZeRO-3: all-gather the stage's weights once per micro-batch.
  shard = weight_shard(model, layout, dp)
  gather = jnp.where(layout.zero_stage >= 3, collectives.collective_time(
      "all_gather", shard * param_bytes, dp * layout.cp, cluster.scaleup_domain, hw, eff,
      tau), 0.0)
  gather_exposed = gather * (1.0 - eff.dp_overlap)
  compute_s = m * pt.compute_s
  memory_s = m * pt.memory_s
  comm_s = m * (pt.comm_s + gather_exposed)
  bubble_s = (layout.pp - 1.0) * stage_s
  overhead_s = eff.infer_overhead_s + (
      batch_transfer_s(job, eff, n) + returned_outputs_s(
          job, eff, n, LOG_PROB_RETURN_BYTES if lm_head and entropy
          else ONE_OUTPUT_RETURN_BYTES) if controller else 0.0)
  flops = n * seq * model.forward_flops_per_token(ctx)
  work_gpu_s = flops / (hw.peak_flops_per_s * hw.matmul_efficiency_max)
  depth_s = layout.pp * stage_s  # one micro-batch through every stage
  # Memory: weights (ZeRO-3 sharded), activations of one micro-batch, logits.
  weights = shard * param_bytes / jnp.where(layout.zero_stage >= 3, dp * layout.cp, 1.0)
  act = 4.0 * mb_seqs * seq_peak / layout.cp * model.hidden * 2.0 / layout.tp
  logits = (mb_seqs * seq_peak / layout.cp * model.vocab * job.logits_bytes / layout.tp
            if lm_head else jnp.zeros(()))
  memory = common.Memory.zeros()._replace(weights=weights, activations=act, logits=logits,
                                          workspace=jnp.asarray(1.0 * 2**30))
  return common.make_cost(compute_s, memory_s, comm_s, bubble_s, overhead_s, work_gpu_s,
                          depth_s, flops, memory, micro_batches=m, dp=dp)
