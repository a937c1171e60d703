"""Import of a NeMo-RL run: its YAML config.

Reads the keys of NVIDIA-NeMo/RL@7ea279a (``examples/configs/grpo_math_1B.yaml``,
``grpo_rm_1B.yaml``, ``ppo_math_1B.yaml`` and the typed configs of
``nemo_rl/models/policy`` and ``nemo_rl/models/generation/vllm``) that
:func:`export.to_nemo_rl` writes. A config that names a ``defaults:`` base
must itself hold the keys read here (NeMo-RL merges the base; this reader does
not), else the error names the key. Pools: generation shares the policy's
GPUs (``colocated.enabled``: pool ``all``) or takes its
``colocated.resources`` (pool ``gen``), the reward model takes
``env.reward_model.resources`` (pool ``rm``), the policy (actor, reference,
value model) the rest of ``cluster`` (pool ``train``).

The CPU optimizer (``offload``) is ``megatron_cfg.optimizer.optimizer_cpu_offload`` or
``dtensor_cfg.cpu_offload`` (FSDP2's ``CPUOffloadPolicy``); the policy's ``swap`` follows
the placement (colocated generation, or PPO, moves its state to the host between steps).
Weights reach the engines by CUDA IPC when colocated (``ipc``), else by packed NCCL
broadcasts (``bucketed``) or ``refit_transport: nccl_reshard`` (``reshard``).

What the config cannot state: the mean response length, the architecture (a
model name naming no preset), the accelerator, and the reference's and the
reward model's sharding and recompute (taken from the actor's layout). A model name
that is an instruction linking to a guide of NeMo-RL's own repository is read from
that guide in the checkout holding the config (:mod:`export._src.model_guides`).
"""

from __future__ import annotations

import os
from typing import Any

import costmodel as cm
from export._src import compose
from export._src import fp8_recipes
from export._src import importing
from export._src import model_guides
from export._src import speculative_keys
from export._src.importing import flag
from export._src.importing import number
from export.nemo_rl import engines as nemo_rl_engines
from export.nemo_rl import record

FW = "NeMo-RL"
UNEXPRESSED = {"reference.infer": ("zero_stage", "recompute", "offload", "swap"),
               "reward.infer": ("zero_stage", "recompute", "sequence_parallel")}
_RECOMPUTE = {"selective": 1.0, "full": 2.0}


def read_source(source: Any) -> dict[str, Any]:
  """Flat ``{dotted key: value}`` of a nested dict or a YAML file (composed and
  interpolated: :mod:`export._src.compose`)."""
  if isinstance(source, dict):
    return importing.flatten(source)
  return compose.read(source, FW, inherit=True)


def _layout(o: dict, pre: str, micro: float, notes: list[str]) -> cm.Parallel:
  """A trained model's layout from ``{pre}.megatron_cfg`` or ``{pre}.dtensor_cfg``."""
  if flag(o, f"{pre}.megatron_cfg.enabled", FW):
    m = f"{pre}.megatron_cfg"
    tp = number(o, f"{m}.tensor_model_parallel_size", FW)
    granularity = o.get(f"{m}.recompute_granularity")
    if granularity is not None and granularity not in _RECOMPUTE:
      raise ValueError(f"{FW}: {m}.recompute_granularity={granularity!r} is not selective or full")
    f = dict(tp=tp, pp=number(o, f"{m}.pipeline_model_parallel_size", FW),
             cp=number(o, f"{m}.context_parallel_size", FW),
             ep=number(o, f"{m}.expert_model_parallel_size", FW, 1),
             etp=number(o, f"{m}.expert_tensor_parallel_size", FW, 1),
             zero_stage=1 if flag(o, f"{m}.optimizer.use_distributed_optimizer", FW, True) else 0,
             offload=1 if flag(o, f"{m}.optimizer.optimizer_cpu_offload", FW) else 0,
             recompute=_RECOMPUTE.get(granularity, 0.0) if flag(
                 o, f"{m}.activation_checkpointing", FW) else 0.0)
    sp = flag(o, f"{m}.sequence_parallel", FW) if tp > 1 else True
  elif flag(o, f"{pre}.dtensor_cfg.enabled", FW, True):
    d = f"{pre}.dtensor_cfg"
    tp = number(o, f"{d}.tensor_parallel_size", FW)
    f = dict(tp=tp, cp=number(o, f"{d}.context_parallel_size", FW),
             ep=number(o, f"{d}.expert_parallel_size", FW, 1), zero_stage=3,
             offload=1 if flag(o, f"{d}.cpu_offload", FW) else 0,
             recompute=2 if flag(o, f"{d}.activation_checkpointing", FW) else 0)
    sp = flag(o, f"{d}.sequence_parallel", FW) if tp > 1 else True
  else:
    raise ValueError(f"{FW}: {pre}.dtensor_cfg.enabled and {pre}.megatron_cfg.enabled are both "
                     "False; one backend must be on")
  c = f"{pre}.megatron_cfg.fp8_cfg"
  precision = cm.Precision()
  if flag(o, f"{pre}.megatron_cfg.enabled", FW) and flag(o, f"{c}.enabled", FW):
    precision = fp8_recipes.training(FW, c, o.get(f"{c}.fp8", "e4m3"),
                                     o.get(f"{c}.fp8_recipe"), flag(o, f"{c}.fp8_param", FW),
                                     notes)
  return cm.Parallel(micro_batch=micro, sequence_parallel=sp, precision=precision,
                     **{k: float(v) for k, v in f.items()})


def _algorithm(o: dict) -> tuple[str, str]:
  if "ppo.num_prompts_per_step" in o:
    return "ppo", "ppo"
  if "grpo.num_prompts_per_step" not in o:
    raise ValueError(f"{FW}: neither grpo.num_prompts_per_step nor ppo.num_prompts_per_step is "
                     "set; the config names no algorithm")
  if o.get("grpo.adv_estimator.name", "grpo") == "reinforce_plus_plus":
    return "grpo", "reinforce_pp"
  if flag(o, "grpo.use_leave_one_out_baseline", FW):
    return "grpo", "rloo"
  if flag(o, "grpo.use_dynamic_sampling", FW):
    return "grpo", "dapo"
  return "grpo", "grpo"


def read(source: Any, **missing: Any) -> importing.Imported:
  """The job, plan and cluster of a NeMo-RL config (see the module docstring).

  ``oversample`` defaults to DAPO's ``grpo.batch_multiplier``.

  Raises:
    ValueError: naming the key and its value, or the keyword of a missing fact.
  """
  o = importing.Tracked(read_source(source))
  section, algorithm = _algorithm(o)
  if algorithm == "dapo" and "oversample" not in missing:
    missing = {**missing, "oversample": number(o, "grpo.batch_multiplier", FW, 1, kind=float)}
  g = importing.given(FW, missing)
  guide_notes: list[str] = []
  guided = (None if g.model is not None or isinstance(source, dict) else
            model_guides.guided_model(o.get("policy.model_name"), os.fspath(source),
                                      record.PIN.split("@")[0], guide_notes))
  actor = guided or importing.model_spec(g.model, "model", o.get("policy.model_name"))
  prompts = number(o, f"{section}.num_prompts_per_step", FW)
  n = number(o, f"{section}.num_generations_per_prompt", FW)
  max_response = number(o, "policy.generation.max_new_tokens", FW)
  total = number(o, "policy.max_total_sequence_length", FW)
  notes = guide_notes + ([f"defaults: {', '.join(o[compose.UNFOUND])} not found next to the "
                          "config: its keys are NeMo-RL's defaults only where this config "
                          "restates them"] if compose.UNFOUND in o else [])
  if total <= max_response:
    # Prompt and response share max_total_sequence_length (vLLM's max_model_len): the
    # config states no prompt length of its own.
    prompt = importing.unstated_prompt(
        g, f"prompt and response share policy.max_total_sequence_length={total}", notes,
        cap=min(number(o, "data.max_input_seq_length", FW, total), total // 2))
    if not 1 <= prompt < total:
      raise ValueError(f"{FW}: prompt_len={prompt!r} must lie in [1, "
                       f"policy.max_total_sequence_length={total})")
    max_response = total - prompt
  gbs = number(o, "policy.train_global_batch_size", FW)
  if (prompts * n) % gbs:
    raise ValueError(f"{FW}: policy.train_global_batch_size={gbs} must divide "
                     f"{section}.num_prompts_per_step x num_generations_per_prompt = {prompts * n}")
  if section == "ppo":
    use_ref = not flag(o, "ppo.skip_reference_policy_logprobs_calculation", FW)
  else:
    use_ref = float(number(o, "loss_fn.reference_policy_kl_penalty", FW, 0.01, kind=float,
                           minimum=0)) != 0.0
  reward = "env.reward_model.resources.num_nodes" in o
  job = importing.build_job(FW, g, algorithm, actor, prompts, n, total - max_response,
                            max_response, prompts * n // gbs,
                            number(o, "ppo.ppo_epochs", FW, 1) if section == "ppo" else 1,
                            use_ref, reward, _lora(o), o.get("env.reward_model.model_name"))

  colocated = flag(o, "policy.generation.colocated.enabled", FW, True)
  # The policy's state goes to the host around colocated generation and, in PPO, while the
  # value model trains (grpo.py refit_policy_generation, ppo.py offload_to_cpu).
  seq = float(job.prompt_len) + float(g.response_mean)
  mb = "policy.dynamic_batching" if flag(o, "policy.dynamic_batching.enabled", FW) else (
      "policy.sequence_packing")
  train = _layout(o, "policy", _micro(o, "policy.train_micro_batch_size", f"{mb}.train_mb_tokens",
                                      seq), notes).replace(
      swap=1.0 if colocated or section == "ppo" else 0.0)
  infer = train.replace(micro_batch=_micro(o, "policy.logprob_batch_size",
                                           f"{mb}.logprob_mb_tokens", seq))
  roles = [cm.RolePlan("actor", "train", train=train, infer=infer)]
  if use_ref:
    roles.append(cm.RolePlan("reference", "train", infer=infer))
  if section == "ppo":
    critic = _layout(o, "value", float(number(o, "value.train_micro_batch_size", FW)), notes)
    roles.append(cm.RolePlan("critic", "train", train=critic))

  nodes, per_node = number(o, "cluster.num_nodes", FW), number(o, "cluster.gpus_per_node", FW)
  pools = {}
  c = "policy.generation.colocated.resources"
  if not colocated:
    # grpo.py setup: on a one-node cluster a null num_nodes is that node
    gen_nodes = number(o, f"{c}.num_nodes", FW, 1 if nodes == 1 else None)
    pools["gen"] = gen_nodes * number(o, f"{c}.gpus_per_node", FW)
  if reward:
    rm = "env.reward_model"
    pools["rm"] = (number(o, f"{rm}.resources.num_nodes", FW)
                   * number(o, f"{rm}.resources.gpus_per_node", FW))
    roles.append(cm.RolePlan("reward", "rm", infer=infer.replace(
        tp=float(number(o, f"{rm}.dtensor_cfg.tensor_parallel_size", FW, 1)),
        cp=float(number(o, f"{rm}.dtensor_cfg.context_parallel_size", FW, 1)), pp=1.0, ep=1.0,
        vpp=1.0, etp=1.0, swap=0.0, precision=cm.Precision(),
        offload=1.0 if flag(o, f"{rm}.dtensor_cfg.cpu_offload", FW) else 0.0,
        micro_batch=float(number(o, f"{rm}.batch_size", FW)))))
  rest = nodes * per_node - sum(pools.values())
  if rest < 1:
    raise ValueError(f"{FW}: cluster {nodes} x {per_node} GPUs leaves {rest} for the policy after "
                     f"generation and the reward model ({sum(pools.values())})")
  policy_pool = "all" if colocated else "train"
  roles = [cm.RolePlan(r.role, policy_pool if r.pool == "train" else r.pool, train=r.train,
                       infer=r.infer) for r in roles]
  pools[policy_pool] = rest

  engine = nemo_rl_engines.read(o, g, actor, train, colocated, notes).replace(
      speculative=speculative_keys.read_nemo_rl(o, g.speculative_acceptance, notes))
  a = f"{section}.async_{section}"
  mode = cm.Mode()
  if flag(o, f"{a}.enabled", FW):
    mode = cm.Mode(staleness=number(o, f"{a}.max_trajectory_age_steps", FW),
                   partial_rollout=flag(o, f"{a}.in_flight_weight_updates", FW))
  plan = cm.Plan(pools=tuple(cm.Pool(k, float(x)) for k, x in pools.items()), roles=tuple(roles),
                 engine=engine, rollout_pool="all" if colocated else "gen", mode=mode)
  cluster = importing.build_cluster(g, [(nodes, per_node)])
  cm.validate_plan(job, plan, cluster)
  return importing.imported(job, plan, cluster, o, _RELEVANT, tuple(notes))


# Keys a cost could depend on: set but read by no rule above, they are listed as not modelled.
_RELEVANT = (r"^(?!.*(mcore_generation_config|real_quant)).*(offload|parallel_size|micro_batch|"
             r"(?<!val_)batch_size|mb_tokens|dynamic_batching\.enabled|"
             r"sequence_packing\.enabled|lora_cfg\.(enabled|dim)|gpu_memory_utilization|"
             r"max_num_seqs|enforce_eager|gpus_per_node|num_nodes|max_trajectory_age|"
             r"activation_checkpointing|recompute|colocated\.enabled|megatron_cfg\.enabled|"
             r"dtensor_cfg\.enabled|async_\w+\.enabled|backend$)")


def _lora(o: dict) -> cm.LoRA | None:
  """LoRA of the policy: ``dtensor_cfg.lora_cfg`` (FSDP2) or ``megatron_cfg.peft`` (rank
  ``dim``); the reference is the base with the adapters off."""
  for key in ("policy.dtensor_cfg.lora_cfg", "policy.megatron_cfg.peft"):
    backend = key.rsplit(".", 1)[0]
    if flag(o, f"{backend}.enabled", FW, backend.endswith("dtensor_cfg")) and flag(
        o, f"{key}.enabled", FW):
      return cm.LoRA(rank=float(number(o, f"{key}.dim", FW)), shared_reference=True)
  return None


def _micro(o: dict, key: str, tokens_key: str, seq: float) -> float:
  """A micro-batch: ``key``, or with dynamic batching / sequence packing the micro-batch
  token budget over the mean sequence."""
  packed = flag(o, "policy.dynamic_batching.enabled", FW) or flag(
      o, "policy.sequence_packing.enabled", FW)
  if packed and o.get(tokens_key) is not None:
    o.get(key)  # superseded by the token budget
    return float(max(1, int(number(o, tokens_key, FW) // seq)))
  return float(number(o, key, FW))
