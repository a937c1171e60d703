"""Export of a plan to NeMo-RL: a GRPO config as a nested dict.

Shaped like NVIDIA-NeMo/RL ``examples/configs/grpo_math_1B.yaml``;
:func:`export.to_yaml` writes it.
"""

from __future__ import annotations

from typing import Any

import costmodel as cm
from export._src.base import Exporter
from export._src.base import to_yaml
from export._src.common import Concrete
from export._src.common import check_batch
from export._src.common import check_recompute
from export._src.common import concrete
from export._src.common import refuse_degrees
from export._src.common import same_degrees

VERSION = "NVIDIA-NeMo/RL@7ea279a"


def _nemo_cluster(c: Concrete, cluster: cm.Cluster) -> tuple[dict, dict]:
  """``cluster`` and ``policy.generation.colocated`` sections."""
  fw = "NeMo-RL"
  gpn = cluster.gpus_per_node

  def whole(pool: str) -> int:
    g = c.pools[pool]
    if g % gpn:
      raise ValueError(f"{fw}: pool {pool!r} of {g} GPUs is not whole nodes of {gpn} GPUs; on "
                       "more than one node NeMo-RL gives generation and training whole nodes "
                       "(policy.generation.colocated.resources.num_nodes)")
    return g // gpn

  a, r = c.actor_pool, c.rollout_pool
  if c.colocated:
    g = c.pools[a]
    if g <= gpn:
      return {"num_nodes": 1, "gpus_per_node": g}, {"enabled": True}
    return {"num_nodes": whole(a), "gpus_per_node": gpn}, {"enabled": True}
  total = c.pools[a] + c.pools[r]
  if total <= gpn:
    return ({"num_nodes": 1, "gpus_per_node": total},
            {"enabled": False, "resources": {"num_nodes": 1, "gpus_per_node": c.pools[r]}})
  gen_nodes, train_nodes = whole(r), whole(a)
  return ({"num_nodes": gen_nodes + train_nodes, "gpus_per_node": gpn},
          {"enabled": False, "resources": {"num_nodes": gen_nodes, "gpus_per_node": gpn}})


def to_nemo_rl(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
               backend: str | None = None) -> dict[str, Any]:
  """A NeMo-RL GRPO config snippet (nested dict) that runs ``plan``.

  The policy workers hold the actor and the reference; generation (vLLM)
  shares their GPUs (``colocated.enabled``) or takes its own: part of the node
  on one node, whole nodes otherwise. Training uses DTensor (FSDP2: TP,
  CP, full sharding, CPU offload) or Megatron (TP, PP, CP, EP; ZeRO 0-3 via
  the distributed optimizer and Megatron FSDP). ``train_global_batch_size``
  counts samples per optimizer step.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job (GRPO, DAPO or RLOO).
    cluster: The cluster.
    backend: ``dtensor`` or ``megatron``; None picks DTensor unless the
      layout needs Megatron (pp > 1, ep > 1 or zero_stage < 3).

  Returns:
    Nested dict with ``cluster``, ``grpo``, ``policy`` (and ``loss_fn`` for
    asynchronous GRPO); :func:`to_yaml` writes it.

  Raises:
    ValueError: naming the setting when NeMo-RL's GRPO config cannot express
      the plan: PPO (a critic: NeMo-RL's PPO, Megatron only, has its own
      recipe outside this GRPO config), REINFORCE++ and ReMax, a reward model,
      more than one PPO epoch, a reference or extra pool away from the policy,
      pools that are not whole nodes on several nodes, PP/EP or ZeRO < 3 with
      DTensor, interleaved pipelines, offload with Megatron, selective
      recompute.

  References:
    NVIDIA-NeMo/RL ``examples/configs/grpo_math_1B.yaml``; PPO support:
    NVIDIA-NeMo/RL pull request 2530 (Megatron only).
  """
  fw = "NeMo-RL"
  if backend not in (None, "dtensor", "megatron"):
    raise ValueError(f"to_nemo_rl: backend={backend!r} is not one of (None, 'dtensor', 'megatron')")
  c = concrete(plan, job, cluster, fw)
  if c.has("critic"):
    raise ValueError(f"{fw}: algorithm={c.algorithm!r} needs a critic; the GRPO config has no "
                     "critic (value model) settings, and NeMo-RL's PPO (Megatron only) is a "
                     "separate recipe this export does not write")
  if c.algorithm not in ("grpo", "dapo", "rloo"):
    raise ValueError(f"{fw}: algorithm={c.algorithm!r}: the GRPO config expresses grpo, dapo "
                     "(dynamic sampling) and rloo (leave-one-out baseline) only")
  if c.has("reward"):
    raise ValueError(f"{fw}: a reward model has no pool in the GRPO config (rewards come from "
                     "environments); use a rule-based reward")
  if c.ppo_epochs != 1:
    raise ValueError(f"{fw}: ppo_epochs={c.ppo_epochs}: GRPO makes one pass over each batch")
  a_pool = c.actor_pool
  if c.has("reference") and c.role_pool["reference"] != a_pool:
    raise ValueError(f"{fw}: reference on pool {c.role_pool['reference']!r}: the policy workers "
                     f"on the actor's pool {a_pool!r} hold the reference model")
  actor = c.train["actor"]
  same_degrees(fw, "actor", actor, c.infer["actor"],
               "the policy workers compute log-probs with the training layout")
  if c.has("reference"):
    same_degrees(fw, "reference", actor, c.infer["reference"],
                 "the policy workers compute reference log-probs with the training layout",
                 train_role="actor")
    if c.infer["reference"].micro_batch != c.infer["actor"].micro_batch:
      raise ValueError(f"{fw}: reference.infer.micro_batch differs from the actor's; the policy "
                       "has one logprob_batch_size")
  if backend is None:
    backend = "megatron" if (actor.pp > 1 or actor.ep > 1 or actor.zero_stage < 3) else "dtensor"
  check_recompute(fw, "actor.train", actor, "activation_checkpointing")
  refuse_degrees(fw, "actor.train", actor, ("vpp",),
                 "megatron_cfg has no interleaved (virtual) pipeline setting")
  e = c.engine
  cluster_cfg, colocated = _nemo_cluster(c, cluster)

  if backend == "dtensor":
    refuse_degrees(fw, "actor.train", actor, ("pp", "ep"),
                   "dtensor_cfg has tensor and context parallelism only; use backend='megatron'")
    if actor.zero_stage != 3:
      raise ValueError(f"{fw}: actor.train.zero_stage={actor.zero_stage}: DTensor (FSDP2) "
                       "shards parameters, gradients and optimizer state; use backend='megatron'")
    train_cfg = {
        "dtensor_cfg": {"enabled": True, "tensor_parallel_size": actor.tp,
                        "context_parallel_size": actor.cp,
                        "sequence_parallel": actor.sequence_parallel_on,
                        "activation_checkpointing": actor.recompute == 2,
                        "cpu_offload": actor.offload},
        "megatron_cfg": {"enabled": False}}
    dp = c.pools[a_pool] // (actor.tp * actor.cp)
  else:
    if actor.offload:
      raise ValueError(f"{fw}: actor.train.offload=1: megatron_cfg has no CPU offload setting; "
                       "use backend='dtensor'")
    ddp = {"use_custom_fsdp": actor.zero_stage >= 2}
    if actor.zero_stage >= 2:
      ddp["data_parallel_sharding_strategy"] = ("optim_grads" if actor.zero_stage == 2
                                                else "optim_grads_params")
    train_cfg = {
        "dtensor_cfg": {"enabled": False},
        "megatron_cfg": {"enabled": True, "tensor_model_parallel_size": actor.tp,
                         "pipeline_model_parallel_size": actor.pp,
                         "context_parallel_size": actor.cp,
                         "expert_model_parallel_size": actor.ep,
                         "sequence_parallel": actor.sequence_parallel_on,
                         "activation_checkpointing": actor.recompute == 2,
                         "optimizer": {"use_distributed_optimizer": actor.zero_stage >= 1},
                         "distributed_data_parallel_config": ddp}}
    dp = c.pools[a_pool] // actor.model_parallel
  gbs = c.mini_batch_prompts("policy.train_global_batch_size", fw) * c.n
  check_batch(fw, "policy.train_global_batch_size", gbs, dp, actor.micro_batch,
              "policy.train_micro_batch_size")

  grpo: dict[str, Any] = {"num_prompts_per_step": c.prompts, "num_generations_per_prompt": c.n,
                          "normalize_rewards": c.algorithm != "rloo",
                          "use_leave_one_out_baseline": c.algorithm == "rloo"}
  if c.algorithm == "dapo":
    grpo["use_dynamic_sampling"] = True
    grpo["batch_multiplier"] = round(c.oversample, 6)
  asynchronous = c.staleness > 0
  grpo["async_grpo"] = {"enabled": asynchronous}
  if asynchronous:
    grpo["async_grpo"]["max_trajectory_age_steps"] = c.staleness
    grpo["async_grpo"]["in_flight_weight_updates"] = c.partial_rollout
  out: dict[str, Any] = {"cluster": cluster_cfg, "grpo": grpo}
  if asynchronous:  # the config asks for importance-sampling correction in async GRPO
    out["loss_fn"] = {"use_importance_sampling_correction": True}
  vllm_cfg = {"tensor_parallel_size": e.tp, "pipeline_parallel_size": e.pp,
              "expert_parallel_size": e.ep, "gpu_memory_utilization": e.memory_fraction,
              "async_engine": asynchronous}
  out["policy"] = {
      "train_global_batch_size": gbs,
      "train_micro_batch_size": actor.micro_batch,
      "logprob_batch_size": c.infer["actor"].micro_batch,
      "max_total_sequence_length": c.prompt_len + c.max_response,
      **train_cfg,
      "generation": {"backend": "vllm", "max_new_tokens": c.max_response, "vllm_cfg": vllm_cfg,
                     "vllm_kwargs": {"max_num_seqs": e.max_seqs,
                                     "enable_prefix_caching": e.prefix_caching},
                     "colocated": colocated},
  }
  return out



EXPORTER = Exporter(name="nemo_rl", framework="NeMo-RL", version=VERSION, to_config=to_nemo_rl,
                    render_settings=to_yaml, kind="yaml")
