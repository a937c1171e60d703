"""veRL worker keys: parallel layout, sharding, offload and recompute of each role.

Keys of verl-project/verl@1dda039 ``verl/trainer/config/_generated_ppo_trainer.yaml``
(FSDP) and ``_generated_ppo_megatron_trainer.yaml`` (Megatron).

Offload and swap (``verl/workers/engine/fsdp/transformer_impl.py``,
``engine/megatron/transformer_impl.py``): the ``param_offload``,
``grad_offload`` and ``optimizer_offload`` keys move a role's state to the
host between its uses and back (``Parallel.swap``); the CPU optimizer
(``Parallel.offload``) is FSDP2's ``offload_policy`` (``CPUOffloadPolicy``,
which turns the other two off) or Megatron's ``optimizer_cpu_offload``
(``optim.override_optimizer_config``, read by
``verl/utils/megatron/optimizer.py``). The FSDP reference is
``forward_only``, which always keeps its parameters on the host
(``CPUOffload(offload_params=True)``): its layout has ``offload=1``.
"""

from __future__ import annotations

from export._src.common import Concrete
from export._src.common import Layout
from export._src.refusals import check_recompute
from export._src.refusals import refuse_degrees
from export._src.refusals import same_degrees

_RECOMPUTE_NAMES = ("none", "selective", "full")


def engine_keys(o: dict, prefix: str, lay: Layout, strategy: str, role: str, train: bool,
                moe: bool) -> None:
  """Parallel, offload and recompute keys of one worker config (``prefix``).

  FSDP offers Ulysses sequence parallelism only; Megatron offers TP, PP
  (interleaved), CP and EP and shards optimizer state only. veRL's Megatron
  ``expert_tensor_parallel_size`` defaults to null, which Megatron reads as the
  TP degree; the model's experts are not tensor-parallel, so an MoE model
  gets 1.
  """
  fw = f"veRL ({strategy})"
  if lay.vpp > 1 and lay.pp == 1:
    raise ValueError(f"{fw}: {role}.vpp={lay.vpp} needs pp > 1")
  if strategy == "megatron":
    m = f"{prefix}.megatron"
    o[f"{m}.tensor_model_parallel_size"] = lay.tp
    o[f"{m}.pipeline_model_parallel_size"] = lay.pp
    if lay.vpp > 1:
      o[f"{m}.virtual_pipeline_model_parallel_size"] = lay.vpp
    o[f"{m}.context_parallel_size"] = lay.cp
    o[f"{m}.expert_model_parallel_size"] = lay.ep
    if moe:
      o[f"{m}.expert_tensor_parallel_size"] = lay.etp
    o[f"{m}.param_offload"] = lay.swap
    if not train:
      if lay.offload:
        raise ValueError(f"{fw}: {role}.infer.offload=1: the Megatron {role} has no CPU-offloaded "
                         "parameters (megatron.param_offload moves them to the host between uses: "
                         "swap=1)")
      return
    o[f"{m}.sequence_parallel"] = lay.sequence_parallel_on
    if lay.zero_stage > 1:
      raise ValueError(f"{fw}: {role}.train.zero_stage={lay.zero_stage}: veRL's Megatron workers "
                       "shard only optimizer state (use_distributed_optimizer, ZeRO-1); use "
                       "zero_stage 0 or 1, or strategy='fsdp'")
    o[f"{m}.use_distributed_optimizer"] = lay.zero_stage == 1
    o[f"{m}.grad_offload"] = lay.swap
    o[f"{m}.optimizer_offload"] = lay.swap
    if lay.offload:
      if lay.zero_stage != 1:
        raise ValueError(f"{fw}: {role}.train.offload=1 with zero_stage=0: Megatron's "
                         "optimizer_cpu_offload needs use_distributed_optimizer (zero_stage 1)")
      o[f"+{prefix}.optim.override_optimizer_config.optimizer_cpu_offload"] = True
    if lay.recompute:
      t = f"{m}.override_transformer_config"
      o[f"{t}.recompute_granularity"] = _RECOMPUTE_NAMES[lay.recompute]
      if lay.recompute == 2:
        o[f"{t}.recompute_method"] = "uniform"
        o[f"{t}.recompute_num_layers"] = 1
    return
  refuse_degrees(fw, f"{role}.{'train' if train else 'infer'}", lay, ("tp", "pp", "ep"),
                 "FSDP training has no tensor, pipeline or expert parallelism (only Ulysses "
                 "sequence parallelism, cp); use strategy='megatron'")
  o[f"{prefix}.ulysses_sequence_parallel_size"] = lay.cp


def fsdp_state(o: dict, fsdp: str, model: str, lay: Layout, role: str, strategy: str) -> None:
  """FSDP sharding, offload and checkpointing keys of a training role."""
  fw = f"veRL ({strategy})"
  if lay.zero_stage == 1:
    raise ValueError(f"{fw}: {role}.train.zero_stage=1: FSDP shards parameters, gradients and "
                     "optimizer state together (fsdp_size) or nothing; use zero_stage 0, 2 or 3")
  if lay.zero_stage == 0:
    o[f"{fsdp}.fsdp_size"] = 1
  elif lay.zero_stage == 2:
    o[f"{fsdp}.reshard_after_forward"] = False
  if lay.offload:
    if strategy != "fsdp2":
      raise ValueError(f"{fw}: {role}.train.offload=1: the CPU optimizer is FSDP2's "
                       "fsdp_config.offload_policy (FSDP1 turns CPUOffload off for training); "
                       "use strategy='fsdp2'")
    if lay.swap or lay.zero_stage != 3:
      raise ValueError(f"{fw}: {role}.train.offload=1 with swap={int(lay.swap)}, zero_stage="
                       f"{lay.zero_stage}: offload_policy (CPUOffloadPolicy) shards parameters, "
                       "gradients and optimizer state to the host and turns param_offload and "
                       "optimizer_offload off; use zero_stage 3 and swap 0")
    o[f"{fsdp}.offload_policy"] = True
  o[f"{fsdp}.param_offload"] = lay.swap
  o[f"{fsdp}.optimizer_offload"] = lay.swap
  check_recompute(fw, f"{role}.train", lay, "FSDP's enable_gradient_checkpointing")
  o[f"{model}.enable_gradient_checkpointing"] = lay.recompute == 2


def actor_keys(o: dict, c: Concrete, strategy: str) -> int:
  """Actor and reference keys; returns the mini-batch in prompts."""
  fw = "veRL"
  actor = c.train["actor"]
  same_degrees(fw, "actor", actor, c.infer["actor"],
               "veRL computes old log-probs with the actor's training layout", state=True)
  mini = c.mini_batch_prompts("actor_rollout_ref.actor.ppo_mini_batch_size", fw)
  pre = "actor_rollout_ref.actor"
  o[f"{pre}.strategy"] = strategy
  o[f"{pre}.ppo_mini_batch_size"] = mini
  o[f"{pre}.ppo_micro_batch_size_per_gpu"] = actor.micro_batch
  o[f"{pre}.ppo_epochs"] = c.ppo_epochs
  engine_keys(o, pre, actor, strategy, "actor", train=True, moe=c.moe)
  if strategy != "megatron":
    fsdp_state(o, f"{pre}.fsdp_config", "actor_rollout_ref.model", actor, "actor", strategy)
  if c.has("reference"):
    ref = c.infer["reference"]
    pre = "actor_rollout_ref.ref"
    o[f"{pre}.log_prob_micro_batch_size_per_gpu"] = ref.micro_batch
    engine_keys(o, pre, ref, strategy, "reference", train=False, moe=c.moe)
    if strategy != "megatron" and (not ref.offload or ref.swap):
      raise ValueError(f"veRL ({strategy}): reference.infer.offload={int(ref.offload)}, swap="
                       f"{int(ref.swap)}: the FSDP reference is forward_only, which keeps its "
                       "parameters on the host for every pass (engine/fsdp/transformer_impl.py "
                       "CPUOffload(offload_params=True)); use offload 1, swap 0, or "
                       "strategy='megatron'")
  return mini


def critic_keys(o: dict, c: Concrete, strategy: str) -> None:
  """``critic.*``: FSDP state under ``critic.fsdp``, Megatron under ``critic.megatron``."""
  fw = "veRL"
  critic = c.train["critic"]
  infer = c.infer["critic"]
  same_degrees(fw, "critic", critic, infer, "veRL computes values with the critic's training "
               "layout", state=True)
  o["critic.strategy"] = strategy
  o["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch
  if strategy == "megatron":
    if infer.micro_batch != critic.micro_batch:
      raise ValueError(f"veRL (megatron): critic.infer.micro_batch={infer.micro_batch} differs "
                       f"from critic.train.micro_batch={critic.micro_batch}; the Megatron critic "
                       "has no forward_micro_batch_size_per_gpu (values use "
                       "critic.ppo_micro_batch_size_per_gpu)")
  else:
    o["critic.forward_micro_batch_size_per_gpu"] = infer.micro_batch
  engine_keys(o, "critic", critic, strategy, "critic", train=True, moe=c.critic_moe)
  if strategy != "megatron":
    fsdp_state(o, "critic.fsdp", "critic.model", critic, "critic", strategy)


def reward_keys(o: dict, c: Concrete, nodes: dict, own_pool: bool) -> None:
  """``reward.reward_model.*``: the reward model served by a vLLM engine.

  Its layout maps to the engine's tensor and pipeline degrees; a served model
  batches requests itself, so the plan's reward micro-batch has no setting.
  ``swap`` maps to ``free_cache_engine`` (the engine sleeps between uses,
  its weights on the host).
  """
  rm = c.infer["reward"]
  refuse_degrees("veRL", "reward.infer", rm, ("cp", "ep", "vpp"),
                 "the reward model's vLLM engine (reward.reward_model.rollout) takes tensor and "
                 "pipeline parallelism only")
  if rm.offload:
    raise ValueError("veRL: reward.infer.offload=1: the reward model's vLLM engine keeps its "
                     "weights on the GPU while it serves (free_cache_engine sleeps it between "
                     "uses: swap=1)")
  pre = "reward.reward_model"
  o[f"{pre}.enable"] = True
  o[f"{pre}.enable_resource_pool"] = own_pool
  if own_pool:
    o[f"{pre}.nnodes"], o[f"{pre}.n_gpus_per_node"] = nodes[c.role_pool["reward"]]
  o[f"{pre}.rollout.name"] = "vllm"
  o[f"{pre}.rollout.tensor_model_parallel_size"] = rm.tp
  o[f"{pre}.rollout.pipeline_model_parallel_size"] = rm.pp
  o[f"{pre}.rollout.free_cache_engine"] = rm.swap
