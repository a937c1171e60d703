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

The engine's ``sync_backend`` sets the bytes moved and the software cost
(:func:`backend_move_s`, :func:`backend_overhead_s`):

* ``per_tensor``: the trainer exports every full tensor
  (``Efficiency.sync_export_bytes_per_s``: veRL's README finds the sync
  dominated by this "parameter generation" in Megatron or FSDP) and
  broadcasts it to every engine GPU (or gathers and loads it, colocated),
  one call per tensor: a per-tensor cost
  (dtype and layout conversion, one NCCL call each; the reason a 30B MoE with
  ~18k expert tensors syncs far slower than a dense 7B model). veRL's NCCL
  sync: 15.8 s for Qwen3-30B-A3B on 16 + 16 H20, 58.6 s for Qwen3-235B on
  64 + 64 (volcengine/verl@b178a3c
  ``verl/experimental/fully_async_policy/README.md``);
* ``bucketed``: the same full broadcast packed into buckets
  (``Efficiency.sync_bucket_bytes``), a cost per bucket (veRL's checkpoint
  engine: 4.4 s and 23.7 s for the same two models);
* ``reshard``: shard-to-shard in buckets, each engine GPU receiving only its
  own shard (NeMo-RL ``refit_transport=nccl_reshard``: DeepSeek-V3
  PP16xEP16 -> TP32xDP8 in 2.4-2.8 s on H100, NVIDIA-NeMo/RL@7ea279ab
  ``docs/design-docs/nccl-reshard-refit.md``);
* ``ipc``: colocated, the gathered shard handed to the engine by CUDA IPC
  handles in buckets (NeMo-RL's colocated refit).

An engine in another format (FP8 weights from a BF16 trainer) converts what
it receives (:func:`format_conversion_s`). Every backend pays a fixed overhead too.

Switch (colocated pools only): the engine wakes (weights and KV cache back
into HBM) before generation and sleeps after it; training states that do not
fit beside the engine are offloaded and reloaded over the host link.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.hardware import Hardware
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common


def nic_link(sender: Hardware, receiver: Hardware, eff: Efficiency):
  """``(bytes/s, latency_s)`` of one NIC-to-NIC path between two pools' GPUs:
  the slower side's achieved NIC bandwidth and the longer latency."""
  send = sender.scaleout_bandwidth_bytes_per_s * sender.scaleout_efficiency
  recv = receiver.scaleout_bandwidth_bytes_per_s * receiver.scaleout_efficiency
  return (jnp.minimum(send, recv) * eff.link_efficiency,
          jnp.maximum(sender.scaleout_latency_s, receiver.scaleout_latency_s))


def weight_sync(model: ModelSpec, job: RLJob, train_layout: Parallel, train_gpus,
                engine: Engine, gen_gpus, colocated: bool, cluster: Cluster,
                eff: Efficiency, tau=0.0, gen_device: Hardware | None = None
                ) -> common.StageCost:
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
    gen_device: The rollout pool's GPU when it differs from the training
      pool's (``cluster.accelerator``); a disaggregated sync runs at the
      slower side's NICs.
  """
  hw = cluster.accelerator
  total_bytes = float(model.total_params) * job.param_bytes
  engine_shard = total_bytes / (engine.tp * engine.pp)
  move_s = backend_move_s(model, job, train_layout, train_gpus, engine, gen_gpus, colocated,
                          cluster, eff, tau, gen_device)
  overhead = (eff.sync_overhead_s + backend_overhead_s(model, job, engine, eff, colocated)
              + format_conversion_s(model, job, engine, hw, eff))
  memory = common.Memory.zeros()._replace(weights=engine_shard)
  work = total_bytes / (hw.scaleout_bandwidth_bytes_per_s if not colocated
                        else hw.scaleup_bandwidth_bytes_per_s)
  return common.make_cost(jnp.zeros(()), jnp.zeros(()), move_s, jnp.zeros(()), overhead,
                          work, move_s + overhead, jnp.zeros(()), memory,
                          bytes_moved=jnp.asarray(total_bytes))


def backend_move_s(model: ModelSpec, job: RLJob, train_layout: Parallel, train_gpus,
                   engine: Engine, gen_gpus, colocated: bool, cluster: Cluster,
                   eff: Efficiency, tau=0.0, gen_device: Hardware | None = None):
  """Seconds the weight bytes take on the links, by ``engine.sync_backend``.

  Disaggregated transfers run at the slower side's NICs (:func:`nic_link`).
  """
  hw = cluster.accelerator
  total_bytes = float(model.total_params) * job.param_bytes
  train_model_parallel = train_layout.tp * train_layout.pp * train_layout.ep
  if colocated:
    engine_shard = total_bytes / (engine.tp * engine.pp)
    # Gather the engine shard from the training shards (FSDP/ZeRO-3 shards
    # span the whole pool; Megatron shards span tp * pp * ep).
    group = jnp.where(train_layout.zero_stage >= 3, train_gpus, train_model_parallel)
    return collectives.collective_time("all_gather", engine_shard, group,
                                       cluster.scaleup_domain, hw, eff, tau)
  if engine.sync_backend in ("per_tensor", "bucketed"):
    # The trainer first exports full tensors (gathers its TP/EP shards into
    # the engine's naming and layout; PP stages in parallel), then a
    # pipelined broadcast sends each full tensor to every engine GPU.
    export_s = total_bytes / (train_layout.pp * eff.sync_export_bytes_per_s)
    return export_s + _link_time(total_bytes, train_gpus + gen_gpus, cluster, eff, gen_device)
  nic, latency_s = nic_link(hw, hw if gen_device is None else gen_device, eff)
  senders = train_gpus / jnp.where(train_layout.zero_stage >= 3, 1.0,
                                   train_gpus / train_model_parallel)
  links = jnp.minimum(senders, gen_gpus)
  # Reshard: the MLP and expert weights cross over min(senders, receivers)
  # NICs, every generation GPU receiving its engine shard through its own
  # NIC; the rest (attention, embeddings, norms, router, shared experts) is
  # broadcast whole to every engine GPU (NeMo-RL's "misc path").
  mlp = float(model.n_dense_layers * model.dense_mlp_params() + model.expert_params_total)
  bulk = mlp * job.param_bytes
  misc = total_bytes - bulk
  return smooth.smax(bulk / (links * nic), bulk / (engine.tp * engine.pp) / nic, tau) + \
      misc / nic + latency_s


def _link_time(nbytes, gpus, cluster: Cluster, eff: Efficiency,
               gen_device: Hardware | None = None):
  """A point-to-point stream: over NVLink when both pools fit in one scale-up
  domain (and one GPU type), else over the slower side's NIC."""
  hw = cluster.accelerator
  nic, nic_latency_s = nic_link(hw, hw if gen_device is None else gen_device, eff)
  nvl = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency * eff.link_efficiency
  inside = jnp.asarray(gpus, float) <= cluster.scaleup_domain
  if gen_device is not None and gen_device.name != hw.name:
    inside = jnp.zeros((), bool)
  return nbytes / jnp.where(inside, nvl, nic) + jnp.where(inside, hw.scaleup_latency_s,
                                                          nic_latency_s)


def backend_overhead_s(model: ModelSpec, job: RLJob, engine: Engine, eff: Efficiency,
                       colocated: bool):
  """Software cost of one sync: per tensor, or per bucket of the bytes each
  engine GPU receives."""
  if engine.sync_backend == "per_tensor":
    return model.n_tensors * eff.sync_per_tensor_s
  total_bytes = float(model.total_params) * job.param_bytes
  full = engine.sync_backend == "bucketed" and not colocated
  received = total_bytes if full else total_bytes / (engine.tp * engine.pp)
  return (1.0 + received / eff.sync_bucket_bytes) * eff.sync_per_bucket_s
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
