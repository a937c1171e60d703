"""Parallel layouts of one role (training or inference) and of a rollout engine.

Degrees are pytree leaves: integers for an exact plan, reals for a relaxed one
(the search's continuous variables). Categorical choices with few values
(ZeRO stage, recompute mode, offload) are leaves too, so a batch of plans can
mix them under ``vmap``; flags that change the code path are static.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from costmodel._src import pytree
from costmodel._src.specs.precision import Precision
from costmodel._src.specs.speculative import Speculative

RECOMPUTE = {"none": 0, "selective": 1, "full": 2}
SYNC_BACKENDS = ("per_tensor", "bucketed", "reshard", "ipc")
# vLLM's default gpu_memory_utilization (vllm/engine/arg_utils.py, 0.9): what
# an engine takes on GPUs it does not share.
DEDICATED_MEMORY_FRACTION = 0.9
# What colocated recipes leave the engine beside the training states (veRL's
# and OpenRLHF's colocated examples use 0.4-0.7).
SHARED_MEMORY_FRACTION = 0.6


@pytree.pytree_dataclass
class Parallel:
  """Layout of one role and phase on its pool.

  The data-parallel degree is what is left of the pool:
  ``dp = pool_gpus / (tp * pp * cp)``. Expert parallelism folds into the
  other ranks, so ``ep * etp`` must divide ``tp * dp * cp``.

  Attributes:
    tp: Tensor-parallel degree.
    pp: Pipeline-parallel degree.
    cp: Context-parallel degree (ring attention / Ulysses).
    ep: Expert-parallel degree (MoE).
    micro_batch: Sequences per micro-batch per GPU.
    zero_stage: 0 (none), 1, 2 or 3 (FSDP).
    recompute: 0 none, 1 selective, 2 full.
    offload: 1 keeps parameters and optimizer state in host memory while
      training: the optimizer step runs on the CPU (DeepSpeed ZeRO-Offload,
      Megatron's ``optimizer_cpu_offload``) and ZeRO-3 weight shards stream
      in for every pass.
    swap: 1 moves the role's weights, gradients and optimizer state to host
      memory while its pool generates and back before the role runs again
      (veRL's FSDP ``param_offload`` / ``optimizer_offload`` and Megatron
      ``param_offload`` / ``grad_offload``, OpenRLHF's
      ``--deepspeed_enable_sleep``): host-link time in the switch, HBM freed
      for the KV cache, the optimizer still on the GPU.
    vpp: Interleaved pipeline chunks per GPU (1 = plain 1F1B; Megatron's
      virtual pipeline size): the bubble is ``(pp - 1) / (vpp m)`` stage
      passes, hand-offs ``vpp`` times as many. An integer >= 1, and > 1 only
      with ``pp > 1``.
    sequence_parallel: Megatron SP with TP (static).
    flash_attention: FlashAttention-style attention core (static).
    etp: Expert-tensor-parallel degree with EP (Megatron's
      ``expert_tensor_parallel_size``): 1 keeps each expert whole on its
      rank; veRL's Megatron default sets it to ``tp``. Without EP the
      experts follow TP.
    ep_overlap: Share of the expert all-to-all hidden behind compute, in
      [0, 1] (Megatron's ``--overlap-moe-expert-parallel-comm``,
      DualPipe-style schedules); never more than the pass's compute.
    precision: Formats of weights, GEMMs and KV (static; :class:`Precision`).
  """

  tp: jax.Array | float = 1.0
  pp: jax.Array | float = 1.0
  cp: jax.Array | float = 1.0
  ep: jax.Array | float = 1.0
  micro_batch: jax.Array | float = 1.0
  zero_stage: jax.Array | float = 3.0
  recompute: jax.Array | float = 2.0
  offload: jax.Array | float = 0.0
  vpp: jax.Array | float = 1.0
  swap: jax.Array | float = 0.0
  sequence_parallel: bool = pytree.static_field(default=True)
  flash_attention: bool = pytree.static_field(default=True)
  # ----- MoE and precision ------------------------------------------------
  etp: jax.Array | float = 1.0
  ep_overlap: jax.Array | float = 0.0
  precision: Precision = pytree.static_field(default=Precision())

  def __post_init__(self):
    if isinstance(self.recompute, str):
      pytree.check_one_of("Parallel", RECOMPUTE, recompute=self.recompute)
      object.__setattr__(self, "recompute", float(RECOMPUTE[self.recompute]))
    pytree.check_at_least("Parallel", 1, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                          vpp=self.vpp, etp=self.etp)
    pytree.check_whole("Parallel", tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                       vpp=self.vpp, etp=self.etp)
    _check_moe_precision(self)
    pytree.check_positive("Parallel", micro_batch=self.micro_batch)
    pytree.check_one_of("Parallel", (0, 1, 2, 3), zero_stage=self.zero_stage)
    pytree.check_one_of("Parallel", (0, 1, 2), recompute=self.recompute)
    pytree.check_one_of("Parallel", (0, 1), offload=self.offload, swap=self.swap)

  @property
  def model_parallel(self):
    """GPUs of one model replica: tp * pp * cp."""
    return self.tp * self.pp * self.cp

  def replace(self, **changes) -> Parallel:
    return dataclasses.replace(self, **changes)


def _check_moe_precision(layout: Parallel) -> None:
  """vpp an integer, > 1 only with pp > 1; ep_overlap in [0, 1]; a Precision."""
  vpp, pp = layout.vpp, layout.pp
  if pytree.is_concrete(vpp):
    a = np.asarray(vpp, dtype=float)
    if np.any(a != np.round(a)):
      raise ValueError(f"Parallel: vpp={vpp!r} must be an integer")
    if pytree.is_concrete(pp) and np.any((a > 1) & (np.asarray(pp, dtype=float) <= 1)):
      raise ValueError(f"Parallel: vpp={vpp!r} > 1 needs pp > 1 (pp={pp!r})")
  pytree.check_share("Parallel", ep_overlap=layout.ep_overlap)
  pytree.check_instance("Parallel", Precision, precision=layout.precision)


@pytree.pytree_dataclass
class Engine:
  """A vLLM/SGLang-style rollout engine layout.

  Replicas fill the pool: ``replicas = pool_gpus / (tp * pp)``.

  Attributes:
    tp: Tensor-parallel degree of one engine.
    pp: Pipeline-parallel degree of one engine.
    ep: Expert parallelism inside the engine (1, or tp to shard experts over
      the TP group with all-to-all instead of all-reduce).
    memory_fraction: Share of HBM the engine may use (weights + KV cache).
      None (the default) is resolved by the plan's placement
      (:func:`resolve_memory_fraction`): :data:`DEDICATED_MEMORY_FRACTION`
      on a rollout pool the engine has to itself, :data:`SHARED_MEMORY_FRACTION`
      when training or inference roles share its pool.
    max_seqs: Maximum concurrent sequences per engine.
    prefix_caching: Prefill each prompt once per group of samples (static).
    cuda_graphs: Decode steps replay captured CUDA graphs (vLLM's and SGLang's
      default); False is eager mode (vLLM ``enforce_eager=True``, veRL's
      rollout default in volcengine/verl@008db456
      ``verl/trainer/config/ppo_trainer.yaml``), which pays a per-layer
      kernel-launch and Python cost every step
      (``Efficiency.eager_layer_overhead_s``) (static).
    sync_backend: How trained weights reach the engine (static):
      ``per_tensor`` (every full tensor broadcast, or loaded, one call per
      tensor: veRL's NCCL sync and hybrid-engine ``load_weights``),
      ``bucketed`` (full tensors packed into large buckets and broadcast:
      veRL's checkpoint engine, NeMo-RL's packed broadcast), ``reshard``
      (shard-to-shard in buckets, each engine GPU receiving only its shard:
      NeMo-RL's ``refit_transport=nccl_reshard``, disaggregated only) or
      ``ipc`` (colocated only: CUDA IPC handles of the gathered shard in
      buckets, NeMo-RL's colocated refit).
    dp_attention: Data-parallel attention (SGLang and vLLM
      ``--enable-dp-attention``): 0 or 1 (a bool is taken as 0 or 1; a
      pytree leaf, so a search can choose it without another compiled
      program): each of the engine's ``tp`` GPUs
      runs attention for its own sequences with whole attention weights and
      holds their KV once, while the experts shard over all ``tp`` GPUs with
      all-to-all (wide EP when ``tp`` spans nodes). For MLA, whose latent KV
      TP would replicate, concurrency grows about ``tp``-fold.
    precision: Formats of weights, GEMMs and KV (static; :class:`Precision`).
    speculative: Speculative decoding (:class:`Speculative`: draft kind, draft
      tokens per step, acceptance rate); None decodes one token per step.
    max_batched_tokens: Tokens of one engine step (vLLM's
      ``max_num_batched_tokens``; static): sizes the profile run's activation
      peak that vLLM keeps out of the KV cache
      (:func:`costmodel._src.stages.generate.workspace_bytes`). None: a fixed
      workspace (``WORKSPACE_BYTES``).
  """

  tp: jax.Array | float = 1.0
  pp: jax.Array | float = 1.0
  ep: jax.Array | float = 1.0
  memory_fraction: jax.Array | float | None = None
  max_seqs: jax.Array | float = 1024.0
  prefix_caching: bool = pytree.static_field(default=True)
  cuda_graphs: bool = pytree.static_field(default=True)
  sync_backend: str = pytree.static_field(default="per_tensor")
  # ----- MoE and precision ------------------------------------------------
  dp_attention: jax.Array | float = 0.0
  precision: Precision = pytree.static_field(default=Precision())
  max_batched_tokens: float | None = pytree.static_field(default=None)
  speculative: Speculative | None = None

  def __post_init__(self):
    if isinstance(self.dp_attention, (bool, np.bool_)):
      object.__setattr__(self, "dp_attention", float(self.dp_attention))
    pytree.check_at_least("Engine", 1, tp=self.tp, pp=self.pp, ep=self.ep,
                          max_seqs=self.max_seqs)
    pytree.check_one_of("Engine", (0, 1), dp_attention=self.dp_attention)
    pytree.check_instance("Engine", Precision, precision=self.precision)
    pytree.check_instance("Engine", Speculative, optional=True, speculative=self.speculative)
    pytree.check_fraction("Engine", memory_fraction=self.memory_fraction)
    pytree.check_one_of("Engine", SYNC_BACKENDS, sync_backend=self.sync_backend)
    if self.max_batched_tokens is not None:
      pytree.check_at_least("Engine", 1, max_batched_tokens=self.max_batched_tokens)

  def replace(self, **changes) -> Engine:
    return dataclasses.replace(self, **changes)


def resolve_memory_fraction(engine: Engine, shared: bool) -> Engine:
  """``engine`` with its memory fraction set from the placement when None."""
  if engine.memory_fraction is not None:
    return engine
  frac = SHARED_MEMORY_FRACTION if shared else DEDICATED_MEMORY_FRACTION
  return engine.replace(memory_fraction=frac)
