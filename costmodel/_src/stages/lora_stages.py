"""Stage costs of an actor trained with LoRA (:mod:`costmodel._src.ops.lora`).

Each function takes the full fine-tuning cost of the same stage (the stage
module's own function) and replaces the terms LoRA changes:

* training: the frozen base's weight-gradient GEMMs go (:func:`lora.gemm_passes`),
  the adapters' GEMMs come; data-parallel traffic carries the adapters'
  gradients (plus, under ZeRO-3, the frozen weights' gathers for the forward
  and backward); the optimizer steps the adapters only; memory keeps the
  base's weights and the adapters' full training state;
* reference: no weights of its own beside the actor (the base, adapters off);
* weight sync: the adapters only (``sync="adapters"``), fewer tensors.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import layers
from costmodel._src.ops import lora as lora_lib
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import train as train_lib


def train(model: ModelSpec, job: RLJob, layout: Parallel, pool_gpus, cluster: Cluster,
          eff: Efficiency, tau=0.0, lm_head: bool = True, calls=1.0,
          controller: bool = True) -> common.StageCost:
  """The actor's LoRA updates of one step (arguments as :func:`train.train`)."""
  lora = job.lora
  full = train_lib.train(model, job, layout, pool_gpus, cluster, eff, tau, lm_head=lm_head,
                         calls=calls, controller=controller)
  hw = cluster.accelerator
  n_updates = float(job.ppo_epochs * job.mini_batches)
  m, dp = full.extras["micro_batches"], full.extras["dp"]
  tp, pp, cp, ep = layout.tp, layout.pp, layout.cp, layout.ep
  z = jnp.asarray(layout.zero_stage, float)
  rc = jnp.asarray(layout.recompute, float)

  # One forward of the micro-batch's weight GEMMs (what a weight-gradient
  # pass costs): the training pass without attention, element-wise kernels
  # and collectives.
  seq = infer_lib.sequence_tokens(job)[0]
  mb = job.samples_per_step / job.mini_batches / dp / m
  work = layers.forward_work(model, mb * seq, 0.5 * seq, tp=tp, pp=pp, cp=cp, ep=ep,
                             param_bytes=job.param_bytes, lm_head=lm_head,
                             sequence_parallel=layout.sequence_parallel,
                             flash_attention=layout.flash_attention)
  z0 = jnp.zeros(())
  gemm = common.pass_time(work._replace(attention_flops=z0, activation_bytes=z0,
                                        tp_collectives=z0, ep_collectives=z0, cp_bytes=z0),
                          1.0, cluster, eff, tp, cp, ep, tau,
                          compute_efficiency=eff.train_efficiency)
  full_passes = 3.0 + jnp.where(rc >= 2, 1.0, 0.0)
  extra_passes = lora_lib.gemm_passes(model, lora, full_passes) - full_passes
  d_compute = n_updates * m * gemm.compute_s * extra_passes
  d_memory = n_updates * m * gemm.memory_s * extra_passes

  # Data parallel: adapters' gradients (+ ZeRO-3 gathers of the frozen base).
  shard = infer_lib.weight_shard(model, layout, dp)
  adapters = lora_lib.adapter_params(model, lora) / (tp * pp)
  group = dp * cp
  full_dp_s = full.extras["dp_comm_s"] / n_updates
  lora_dp_bytes = jnp.where(z >= 3, shard * job.param_bytes, 0.0) + adapters * job.grad_bytes
  lora_dp_s = collectives.collective_time("all_reduce", lora_dp_bytes, group,
                                          cluster.scaleup_domain, hw, eff, tau)
  d_dp = (lora_dp_s - full_dp_s) * (1.0 - eff.dp_overlap)
  opt_share = jnp.where(z >= 1, group, 1.0)
  lora_gpu_s, lora_host_s = train_lib.optimizer_step_s(adapters / opt_share, job, hw, eff)
  full_gpu_s, full_host_s = train_lib.optimizer_step_s(shard / opt_share, job, hw, eff)
  off = jnp.asarray(layout.offload, float)
  d_comm = n_updates * (d_dp + off * (lora_host_s - full_host_s))
  d_memory = d_memory + n_updates * (1.0 - off) * (lora_gpu_s - full_gpu_s)

  compute_s = full.compute_s + d_compute
  memory_s = full.memory_s + d_memory
  comm_s = full.comm_s + d_comm
  ctx = 0.5 * seq
  f_tok = model.forward_flops_per_token(ctx)
  g_tok = 2.0 * model.matmul_params_per_token
  flop_ratio = (3.0 * f_tok + (lora_lib.gemm_passes(model, lora, 3.0) - 3.0) * g_tok) / (
      3.0 * f_tok)
  time_ratio = (compute_s + memory_s + comm_s + full.bubble_s + full.overhead_s) / jnp.maximum(
      full.time_s, 1e-12)

  w_a, g_a, o_a = train_lib.zero_memory(adapters, job, layout.zero_stage, group,
                                        layout.offload)
  memory = full.memory._replace(weights=full.memory.weights + w_a, gradients=g_a,
                                optimizer=o_a)
  extras = dict(full.extras, dp_comm_s=n_updates * lora_dp_s,
                adapter_params=jnp.asarray(lora_lib.adapter_params(model, lora)))
  return common.make_cost(compute_s, memory_s, comm_s, full.bubble_s * time_ratio,
                          full.overhead_s, full.work_gpu_s * flop_ratio,
                          full.depth_s * time_ratio, full.flops * flop_ratio, memory, **extras)


def shared_reference(cost: common.StageCost) -> common.StageCost:
  """The reference forward on the actor's frozen base: no weights of its own."""
  return cost._replace(memory=cost.memory._replace(weights=jnp.zeros(())))


def weight_sync(model: ModelSpec, job: RLJob, cost: common.StageCost,
                eff: Efficiency) -> common.StageCost:
  """The weight sync of a LoRA actor from the full sync's ``cost``: the
  adapters' bytes and tensors only (``sync="adapters"``), else unchanged."""
  lora = job.lora
  if lora.sync == "merged":
    return cost
  share = lora_lib.sync_share(model, lora)
  comm_s = cost.comm_s * share
  overhead = eff.sync_overhead_s + lora_lib.adapter_tensors(model, lora) * eff.sync_per_tensor_s
  return common.make_cost(cost.compute_s, cost.memory_s, comm_s, cost.bubble_s,
                          jnp.asarray(overhead, float), cost.work_gpu_s * share,
                          comm_s + overhead, cost.flops, cost.memory,
                          **dict(cost.extras, bytes_moved=cost.extras["bytes_moved"] * share))
