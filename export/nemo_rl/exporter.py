"""Export of a plan to NeMo-RL: a config that extends one of its example configs.

Keys of NVIDIA-NeMo/RL@7ea279a ``examples/configs`` (``grpo_math_1B``,
``grpo_rm_1B``, ``ppo_math_1B`` and their ``_megatron`` variants) and the typed
configs in ``nemo_rl/models/policy/__init__.py`` and
``nemo_rl/models/generation/vllm/config.py``; :func:`export.to_yaml` writes it.
"""

from __future__ import annotations

from typing import Any

import costmodel as cm
from export._src import speculative_keys
from export._src.base import Exporter
from export._src.base import to_yaml
from export._src.common import FP8_TRAINING
from export._src.common import Concrete
from export._src.common import Layout
from export._src.common import concrete
from export._src.common import shares_rollout
from export._src.common import with_layouts
from export._src.refusals import check_sync
from export._src.refusals import refuse_degrees
from export._src.refusals import refuse_remax
from export._src.refusals import same_degrees
from export._src.refusals import training_fp8
from export.nemo_rl import record

VERSION = record.PIN

_FW = "NeMo-RL"


def _whole_nodes(c: Concrete, pool: str, gpn: int, what: str) -> int:
  g = c.pools[pool]
  if g % gpn:
    raise ValueError(f"{_FW}: pool {pool!r} of {g} GPUs is not whole nodes of {gpn} GPUs; on more "
                     f"than one node NeMo-RL gives {what} whole nodes")
  return g // gpn


def _resources(c: Concrete, cluster: cm.Cluster, rm_pool: str | None) -> tuple[dict, dict, dict]:
  """``cluster``, ``policy.generation.colocated`` and the reward model's ``resources``.

  On one node the generation and reward pools take GPUs of it and training the
  rest; on several nodes each takes whole nodes (nemo_rl/algorithms/ppo.py and
  grpo.py ``setup``).
  """
  gpn = cluster.gpus_per_node
  a, r = c.actor_pool, c.rollout_pool
  pools = [a] + ([] if c.colocated else [r]) + ([rm_pool] if rm_pool else [])
  total = sum(c.pools[p] for p in pools)
  one_node = total <= gpn
  res = {}
  for p, what in ((r, "generation (policy.generation.colocated.resources.num_nodes)"),
                  (rm_pool, "the reward model (env.reward_model.resources.num_nodes)")):
    if p is None or (p == r and c.colocated):
      continue
    res[p] = ({"gpus_per_node": c.pools[p], "num_nodes": 1} if one_node else
              {"gpus_per_node": gpn, "num_nodes": _whole_nodes(c, p, gpn, what)})
  if one_node:
    cluster_cfg = {"num_nodes": 1, "gpus_per_node": total}
  else:
    nodes = _whole_nodes(c, a, gpn, "training") + sum(v["num_nodes"] for v in res.values())
    cluster_cfg = {"num_nodes": nodes, "gpus_per_node": gpn}
  colocated = {"enabled": True} if c.colocated else {"enabled": False, "resources": res[r]}
  return cluster_cfg, colocated, res.get(rm_pool, {})


def _megatron_cfg(lay: Layout, role: str) -> dict:
  """``megatron_cfg``: TP, PP, CP, EP (expert TP 1), ZeRO-0/1, optimizer offload."""
  refuse_degrees(_FW, f"{role}.train", lay, ("vpp",),
                 "megatron_cfg has no interleaved (virtual) pipeline setting")
  if lay.zero_stage > 1:
    raise ValueError(f"{_FW}: {role}.train.zero_stage={lay.zero_stage}: Megatron FSDP is not "
                     "switched on by megatron_cfg (distributed_data_parallel_config."
                     "use_custom_fsdp is never read, nemo_rl/models/megatron/setup.py), so "
                     "ZeRO-2/3 would run as ZeRO-1; use zero_stage <= 1, or 3 with "
                     "backend='dtensor'")
  opt: dict[str, Any] = {"use_distributed_optimizer": lay.zero_stage == 1}
  if lay.offload:
    if lay.zero_stage != 1:
      raise ValueError(f"{_FW}: {role}.train.offload=1 with zero_stage=0: "
                       "megatron_cfg.optimizer.optimizer_cpu_offload requires "
                       "use_distributed_optimizer=True (nemo_rl/models/megatron/setup.py)")
    opt.update(optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
  cfg: dict[str, Any] = {"enabled": True, "tensor_model_parallel_size": lay.tp,
         "pipeline_model_parallel_size": lay.pp, "context_parallel_size": lay.cp,
         "expert_model_parallel_size": lay.ep, "expert_tensor_parallel_size": lay.etp,
         "sequence_parallel": lay.sequence_parallel_on,
         "activation_checkpointing": lay.recompute > 0, "optimizer": opt}
  if lay.recompute:
    cfg["recompute_granularity"] = "selective" if lay.recompute == 1 else "full"
  if lay.precision == FP8_TRAINING:  # delayed per-tensor scaling, BF16 weights (setup.py)
    cfg["fp8_cfg"] = {"enabled": True, "fp8": "e4m3", "fp8_recipe": "delayed", "fp8_param": False}
  return cfg


def _dtensor_cfg(lay: Layout, role: str) -> dict:
  """``dtensor_cfg`` (FSDP2): TP, CP, EP, full sharding, CPU offload, full recompute."""
  refuse_degrees(_FW, f"{role}.train", lay, ("pp", "vpp", "etp"),
                 "dtensor_cfg has no pipeline or expert-tensor parallelism; use "
                 "backend='megatron'")
  if lay.zero_stage != 3:
    raise ValueError(f"{_FW}: {role}.train.zero_stage={lay.zero_stage}: DTensor (FSDP2) shards "
                     "parameters, gradients and optimizer state; use backend='megatron'")
  if lay.recompute == 1:
    raise ValueError(f"{_FW}: {role}.train.recompute=selective: dtensor_cfg switches full "
                     "activation checkpointing on or off; use backend='megatron' or recompute "
                     "'full' or 'none'")
  cfg = {"enabled": True, "tensor_parallel_size": lay.tp, "context_parallel_size": lay.cp,
         "sequence_parallel": lay.sequence_parallel_on,
         "activation_checkpointing": lay.recompute == 2, "cpu_offload": lay.offload}
  if lay.ep > 1:
    cfg["expert_parallel_size"] = lay.ep
  return cfg


def _train_section(lay: Layout, role: str, backend: str) -> dict:
  """The backend configs of one trained model, and sequence packing where needed."""
  if backend == "megatron":
    return {"dtensor_cfg": {"enabled": False}, "megatron_cfg": _megatron_cfg(lay, role)}
  out = {"dtensor_cfg": _dtensor_cfg(lay, role), "megatron_cfg": {"enabled": False}}
  if lay.cp > 1:  # context parallelism on DTensor does not run with packed sequences
    out["sequence_packing"] = {"enabled": False}
  return out


def to_nemo_rl(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
               backend: str | None = None) -> dict[str, Any]:
  """A NeMo-RL config (nested dict) that extends an example config and runs ``plan``.

  GRPO, DAPO (dynamic sampling), RLOO and REINFORCE++ extend
  ``grpo_math_1B.yaml`` (``grpo_rm_1B.yaml`` with a reward model), PPO
  ``ppo_math_1B.yaml``; a Megatron policy extends the ``_megatron`` variant.
  The policy workers hold the actor and the reference (and, for PPO, the
  value model sits on the same GPUs); generation (vLLM) shares their GPUs
  (``colocated.enabled``) or takes its own, as does a reward model
  (``env.reward_model.resources``): part of the node on one node, whole nodes
  otherwise. ``train_global_batch_size`` counts samples per optimizer step. A
  GRPO-family plan without a reference sets
  ``loss_fn.reference_policy_kl_penalty: 0``, so NeMo-RL neither loads nor runs
  one; PPO computes reference log-probs
  (``ppo.skip_reference_policy_logprobs_calculation: false``) with the KL
  coefficient left to the user (``ppo_math_1B.yaml`` has 0).

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job.
    cluster: The cluster.
    backend: ``dtensor`` or ``megatron``; None picks DTensor for ZeRO-3 without
      pipeline parallelism, Megatron otherwise.

  Returns:
    Nested dict whose first key is ``defaults``; :func:`to_yaml` writes it.

  Raises:
    ValueError: naming the setting when NeMo-RL cannot run the plan: ReMax,
      PPO without a reference, more than one epoch outside PPO, a reference or critic away from the
      policy, a reward model on the policy's or the generation's GPUs, pools
      that are not whole nodes on several nodes, PP or ZeRO < 3 or selective
      recompute with DTensor, interleaved pipelines, ZeRO-2/3 with Megatron,
      optimizer offload without the distributed optimizer, layouts or
      micro-batches the policy config has one setting for.

  References:
    NVIDIA-NeMo/RL@7ea279a ``examples/configs``;
    ``nemo_rl/models/generation/vllm/vllm_worker.py`` (the keywords it passes
    to vLLM itself, ``vllm_cfg.enable_prefix_caching`` among them);
    ``nemo_rl/algorithms/grpo.py`` (``init_reference_model``).
  """
  if backend not in (None, "dtensor", "megatron"):
    raise ValueError(f"to_nemo_rl: backend={backend!r} is not one of (None, 'dtensor', 'megatron')")
  c = concrete(plan, job, cluster, _FW, rule_set="nemo_rl",
               supports=frozenset({"etp", "train_precision", "speculative",
                                   "engine_state_precision"}))
  refuse_remax(_FW, c, "grpo.adv_estimator has grpo and reinforce_plus_plus, "
               "ppo.adv_estimator gae")
  ppo = c.algorithm == "ppo"
  if ppo and not c.use_reference:
    raise ValueError(f"{_FW}: job.use_reference=False with algorithm='ppo': NeMo-RL's PPO always "
                     "loads a reference model (nemo_rl/algorithms/ppo.py builds the Policy with "
                     "init_reference_model left True); only its log-probs can be skipped")
  if not ppo and c.ppo_epochs != 1:
    raise ValueError(f"{_FW}: ppo_epochs={c.ppo_epochs}: GRPO makes one pass over each batch")
  a_pool = c.actor_pool
  for role in ("reference", "critic"):
    if c.has(role) and c.role_pool[role] != a_pool:
      raise ValueError(f"{_FW}: {role} on pool {c.role_pool[role]!r}: the policy workers on the "
                       f"actor's pool {a_pool!r} hold it")
  rm_pool = c.role_pool.get("reward")
  if rm_pool is not None and rm_pool in (a_pool, c.rollout_pool):
    raise ValueError(f"{_FW}: reward model on pool {rm_pool!r}: env.reward_model.resources gives "
                     "the reward model GPUs of its own, apart from training and generation")
  actor = c.train["actor"]
  same_degrees(_FW, "actor", actor, c.infer["actor"],
               "the policy workers compute log-probs with the training layout", state=True)
  # Colocated, refit_policy_generation moves the policy's weights and optimizer to the host
  # (offload_before_refit / offload_after_refit, grpo.py); PPO also moves them off the
  # training GPUs for the value model (ppo.py offload_to_cpu). Otherwise they stay.
  moved = c.colocated or ppo
  if actor.swap != moved:
    why = ("colocated generation" if c.colocated else "PPO's value model" if ppo else
           "generation on its own GPUs")
    raise ValueError(f"{_FW}: actor.train.swap={int(actor.swap)}: the policy's state "
                     f"{'goes to the host' if moved else 'stays on the GPU'} between steps "
                     f"({why}), which has no setting; use swap={int(moved)}")
  if c.has("reference"):
    same_degrees(_FW, "reference", actor, c.infer["reference"],
                 "the policy workers compute reference log-probs with the training layout",
                 train_role="actor")
    if c.infer["reference"].micro_batch != c.infer["actor"].micro_batch:
      raise ValueError(f"{_FW}: reference.infer.micro_batch differs from the actor's; the policy "
                       "has one logprob_batch_size")
  if backend is None:
    backend = "dtensor" if actor.zero_stage == 3 and actor.pp == 1 and actor.vpp == 1 else \
        "megatron"
  fp8 = training_fp8(_FW, c, "megatron_cfg.fp8_cfg")
  if fp8 and backend != "megatron":
    raise ValueError(f"{_FW}: layout precision compute='fp8' with backend={backend!r}: "
                     "FP8 training is megatron_cfg.fp8_cfg; use backend='megatron'")
  cluster_cfg, colocated, rm_resources = _resources(c, cluster, rm_pool)
  gbs = c.mini_batch_prompts("policy.train_global_batch_size", _FW) * c.n
  # grpo_rm_1B.yaml extends the DTensor grpo_math_1B.yaml; a Megatron policy on it drops the
  # torch optimizer as grpo_math_1B_megatron.yaml does ("remove default FSDP optimizer").
  rm_base = rm_pool is not None and not ppo
  base = "ppo_math_1B" if ppo else "grpo_rm_1B" if rm_base else "grpo_math_1B"
  if backend == "megatron" and not rm_base:
    base += "_megatron"
  out: dict[str, Any] = {"defaults": f"{base}.yaml", "cluster": cluster_cfg}
  out[("ppo" if ppo else "grpo")] = _algorithm_section(c)
  loss = {}
  if not c.use_reference:
    loss["reference_policy_kl_penalty"] = 0
  if c.staleness > 0 and not ppo:  # the GRPO config asks for it in asynchronous mode
    loss["use_importance_sampling_correction"] = True
  if loss:
    out["loss_fn"] = loss
  e = c.engine
  vllm_cfg = {"tensor_parallel_size": e.tp, "pipeline_parallel_size": e.pp,
              "expert_parallel_size": e.ep, "gpu_memory_utilization": e.memory_fraction,
              "async_engine": c.staleness > 0, "enable_prefix_caching": e.prefix_caching,
              "enforce_eager": not e.cuda_graphs}
  policy = {"train_global_batch_size": gbs, "train_micro_batch_size": actor.micro_batch,
            "logprob_batch_size": c.infer["actor"].micro_batch,
            "max_total_sequence_length": c.prompt_len + c.max_response,
            **_train_section(actor, "actor", backend)}
  if backend == "megatron" and rm_base:
    policy["optimizer"] = None
  vllm_kwargs: dict[str, Any] = {"max_num_seqs": e.max_seqs}
  state = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(
      plan.engine.precision.state)
  if state is not None:  # vllm_worker.py passes vllm_kwargs to vLLM whole
    vllm_kwargs["mamba_ssm_cache_dtype"] = state
  if plan.engine.speculative is not None:  # vllm_worker.py passes vllm_kwargs to vLLM whole
    vllm_kwargs["speculative_config"] = {
        k.rsplit(".", 1)[1]: v
        for k, v in speculative_keys.framework_keys("nemo_rl", plan.engine.speculative).items()}
  policy["generation"] = {"backend": "vllm", "max_new_tokens": c.max_response,
                          "vllm_cfg": vllm_cfg, "vllm_kwargs": vllm_kwargs,
                          "colocated": colocated, **_refit(c, backend)}
  out["policy"] = policy
  if ppo:
    out["value"] = _value_section(c, gbs, backend)
  if rm_pool:
    out["env"] = {"reward_model": _reward_section(c, rm_resources)}
    if ppo:
      out["data"] = {"default": {"env_name": "reward_model"}}
  return out


def _refit(c: Concrete, backend: str) -> dict:
  """``policy.generation.refit_transport``: colocated refit is CUDA IPC (``ipc``); apart,
  the default packed NCCL broadcast (``bucketed``) or ``nccl_reshard`` (``reshard``,
  Megatron only without expert TP: weight_sync/nccl_reshard_utils.py)."""
  if c.colocated:
    check_sync(_FW, c, "ipc", "CUDA IPC buckets (colocated refit)")
    return {}
  if c.engine.sync_backend != "reshard":
    check_sync(_FW, c, "bucketed", "packed NCCL broadcasts (refit_transport null; "
               "nccl_reshard is 'reshard')")
    return {}
  if backend != "megatron" or c.train["actor"].etp != 1:
    raise ValueError(f"{_FW}: engine.sync_backend='reshard': refit_transport nccl_reshard "
                     "supports the Megatron policy without expert tensor parallelism only "
                     "(check_nccl_reshard_refit_support); use backend='megatron' and etp 1")
  return {"refit_transport": "nccl_reshard"}


def _algorithm_section(c: Concrete) -> dict:
  ppo = c.algorithm == "ppo"
  d: dict[str, Any] = {"num_prompts_per_step": c.prompts, "num_generations_per_prompt": c.n}
  if ppo:
    d["ppo_epochs"] = c.ppo_epochs
    d["skip_reference_policy_logprobs_calculation"] = not c.use_reference
  else:
    d["normalize_rewards"] = c.algorithm != "rloo"
    d["use_leave_one_out_baseline"] = c.algorithm == "rloo"
    if c.algorithm == "reinforce_pp":
      d["adv_estimator"] = {"name": "reinforce_plus_plus"}
  if c.algorithm == "dapo":
    d["use_dynamic_sampling"] = True
    d["batch_multiplier"] = round(c.oversample, 6)
  asynchronous = {"enabled": c.staleness > 0}
  if c.staleness > 0:
    asynchronous["max_trajectory_age_steps"] = c.staleness
    asynchronous["in_flight_weight_updates"] = c.partial_rollout
  d["async_ppo" if ppo else "async_grpo"] = asynchronous
  return d


def _value_section(c: Concrete, gbs: int, backend: str) -> dict:
  critic = c.train["critic"]
  same_degrees(_FW, "critic", critic, c.infer["critic"],
               "the value workers compute values with the training layout", state=True)
  if critic.swap:
    raise ValueError(f"{_FW}: critic.train.swap=1: the value model stays on its GPUs between "
                     "steps (ppo.py moves only the policy to the host); use swap 0")
  if c.infer["critic"].micro_batch != critic.micro_batch:
    raise ValueError(f"{_FW}: critic.infer.micro_batch={c.infer['critic'].micro_batch} differs "
                     f"from critic.train.micro_batch={critic.micro_batch}; the value config has "
                     "one train_micro_batch_size")
  return {"train_global_batch_size": gbs, "train_micro_batch_size": critic.micro_batch,
          **_train_section(critic, "critic", backend)}


def _reward_section(c: Concrete, resources: dict) -> dict:
  rm = c.infer["reward"]
  refuse_degrees(_FW, "reward.infer", rm, ("pp", "ep", "vpp"),
                 "env.reward_model.dtensor_cfg has tensor and context parallelism only")
  if rm.swap:
    raise ValueError(f"{_FW}: reward.infer.swap=1: env.reward_model.dtensor_cfg.cpu_offload "
                     "keeps the reward model's parameters on the host (offload=1); use swap 0")
  return {"resources": resources, "batch_size": rm.micro_batch,
          "dtensor_cfg": {"tensor_parallel_size": rm.tp, "context_parallel_size": rm.cp,
                          "cpu_offload": rm.offload}}


def as_run(plan: cm.Plan, **_) -> cm.Plan:
  """The plan as NeMo-RL runs it: CUDA IPC refit colocated, packed NCCL broadcasts apart
  (a reshard plan keeps its transport), the policy's state swapped to the host around
  colocated generation or for PPO's value model, the value model resident."""
  colocated = shares_rollout(plan)
  moved = colocated or plan.role("critic") is not None  # PPO: the value model trains there
  sync = "ipc" if colocated else ("reshard" if plan.engine.sync_backend == "reshard" else
                                  "bucketed")
  return with_layouts(plan, {"actor": {"swap": float(moved)}, "critic": {"swap": 0.0}}, sync)


EXPORTER = Exporter(name=record.NAME, framework=record.FRAMEWORK, version=VERSION,
                    to_config=to_nemo_rl,
                    render_settings=to_yaml, kind="yaml", adapt=as_run,
                    forces={
                        "engine.sync_backend": "policy.generation.refit_transport: CUDA IPC "
                        "colocated, packed NCCL broadcasts apart",
                        "actor.swap": "grpo.py refit_policy_generation offload_before_refit / "
                        "offload_after_refit colocated, ppo.py offload_to_cpu for the value "
                        "model; no setting",
                        "critic.swap": "ppo.py moves only the policy to the host; the value "
                        "model stays on its GPUs"})


def run_options(plan: cm.Plan) -> dict[str, str]:
  """The policy backend a command-line export uses: Megatron for TP/PP/EP or ZeRO <= 1, else
  DTensor (FSDP2)."""
  a = plan.role("actor").train
  megatron = float(a.tp) * float(a.pp) * float(a.ep) > 1 or float(a.zero_stage) <= 1
  return {"backend": "megatron" if megatron else "dtensor"}
