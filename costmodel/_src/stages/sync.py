"""Weight sync from the training layout to the generation layout, and the
train <-> generate switch on a shared pool.

Sync (Megatron/FSDP shards -> engine TP shards):

* colocated: each GPU gathers its engine shard (``Psi * bytes / (tp_g pp_g)``)
  from the training shards inside the pool: an all-gather over the training
  shard group, on the scale-up link while the group fits in a domain;
* disaggregated: the whole model crosses the network from the training pool
  to the generation pool, ``Psi * bytes`` split over ``min(senders,
  receivers)`` NICs, and each generation GPU receives its engine shard
  (``Psi * bytes / (tp_g pp_g)``) through its own NIC:
  ``max(Psi b / (links * B_nic), Psi b / (tp_g pp_g B_nic))``.

An engine in another format (FP8 weights from a BF16 trainer) converts what
it receives (:func:`format_conversion_s`). Both pay a per-tensor software
cost (bucketing, dtype and layout conversion, one NCCL call per tensor: the
reason a 30B MoE with ~18k expert tensors syncs far slower than a dense 7B
model) plus a fixed overhead.

Switch (colocated pools only): the engine wakes (weights and KV cache back
into HBM) before generation and sleeps after it; training states that do not
fit beside the engine are offloaded and reloaded over the host link.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src import collectives
from costmodel._src import precision as precision_lib
from costmodel._src import smooth
from costmodel._src.cluster import Cluster
from costmodel._src.efficiency import Efficiency
from costmodel._src.job import RLJob
from costmodel._src.layout import Engine
from costmodel._src.layout import Parallel
from costmodel._src.model import ModelSpec
from costmodel._src.stages import common


def weight_sync(model: ModelSpec, job: RLJob, train_layout: Parallel, train_gpus,
                engine: Engine, gen_gpus, colocated: bool, cluster: Cluster,
                eff: Efficiency, tau=0.0) -> common.StageCost:
  """Cost of one weight sync of the policy into the rollout engines.

  Args:
    model: The policy.
    job: The RL job (parameter bytes).
    train_layout: Layout of the actor's training.
    train_gpus: GPUs of the actor's training pool.
    engine: The rollout engine layout.
    gen_gpus: GPUs of the rollout pool.
    colocated: Whether training and generation share the pool.
    cluster: The cluster.
    eff: Efficiency parameters.
    tau: Smoothing temperature.
  """
  hw = cluster.accelerator
  total_bytes = float(model.total_params) * job.param_bytes
  engine_shard = total_bytes / (engine.tp * engine.pp)
  train_model_parallel = train_layout.tp * train_layout.pp * train_layout.ep
  if colocated:
    # Gather the engine shard from the training shards (FSDP/ZeRO-3 shards
    # span the whole pool; Megatron shards span tp * pp * ep).
    group = jnp.where(train_layout.zero_stage >= 3, train_gpus, train_model_parallel)
    move_s = collectives.collective_time("all_gather", engine_shard, group,
                                         cluster.scaleup_domain, hw, eff, tau)
  else:
    senders = train_gpus / jnp.where(train_layout.zero_stage >= 3, 1.0,
                                     train_gpus / train_model_parallel)
    links = jnp.minimum(senders, gen_gpus)
    nic = hw.scaleout_bandwidth_bytes_per_s * hw.scaleout_efficiency * eff.link_efficiency
    # The model crosses over min(senders, receivers) NICs, and every
    # generation GPU receives its engine shard through its own NIC.
    move_s = smooth.smax(total_bytes / (links * nic), engine_shard / nic, tau) + \
        hw.scaleout_latency_s
  per_tensor = model.n_tensors * eff.sync_per_tensor_s
  overhead = eff.sync_overhead_s + per_tensor + format_conversion_s(model, job, engine, hw, eff)
  memory = common.Memory.zeros()._replace(weights=engine_shard)
  work = total_bytes / (hw.scaleout_bandwidth_bytes_per_s if not colocated
                        else hw.scaleup_bandwidth_bytes_per_s)
  return common.make_cost(jnp.zeros(()), jnp.zeros(()), move_s, jnp.zeros(()), overhead,
                          work, move_s + overhead, jnp.zeros(()), memory,
                          bytes_moved=jnp.asarray(total_bytes))


def format_conversion_s(model: ModelSpec, job: RLJob, engine: Engine, hw, eff: Efficiency):
  """Conversion of the received weights to the engine's format (BF16 -> FP8).

  The trainer sends its own format; each engine GPU quantises its shard
  (:func:`precision.conversion_time_s`). Zero when the formats match.
  """
  dst = precision_lib.weight_bytes(engine.precision, job.param_bytes)
  params = float(model.total_params) / (engine.tp * engine.pp)
  return precision_lib.conversion_time_s(params, model.n_tensors, job.param_bytes, dst, hw, eff)


def switch(model: ModelSpec, job: RLJob, engine: Engine, resident_train_bytes,
           offload_train_bytes, cluster: Cluster, eff: Efficiency) -> common.StageCost:
  """Cost of one train -> generate -> train round trip on a shared pool.

  Args:
    model: The policy served by the engine.
    job: The RL job.
    engine: The rollout engine layout.
    resident_train_bytes: Training bytes per GPU that stay in HBM (for the
      report only).
    offload_train_bytes: Training bytes per GPU moved to the host and back
      (parameters, gradients, optimizer state that do not fit beside the
      engine).
    cluster: The cluster.
    eff: Efficiency parameters.
  """
  hw = cluster.accelerator
  host = hw.host_bandwidth_bytes_per_s * eff.host_efficiency
  engine_w = float(model.total_params) * precision_lib.weight_bytes(
      engine.precision, job.param_bytes) / (engine.tp * engine.pp)
  # Engine sleep offloads its weights and drops the KV cache; wake reloads.
  moved = 2.0 * engine_w + 2.0 * offload_train_bytes
  comm = moved / host
  memory = common.Memory.zeros()._replace(weights=jnp.asarray(resident_train_bytes, float))
  z = jnp.zeros(())
  return common.make_cost(z, z, comm, z, jnp.asarray(eff.switch_overhead_s, float),
                          moved / host, comm + eff.switch_overhead_s, z, memory,
                          bytes_moved=moved)
