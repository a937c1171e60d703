"""Export of a plan to AReaL: a GRPO/PPO experiment config as a nested dict.

Keys of inclusionAI/AReaL@4aef98d ``areal/api/cli_args.py`` (``GRPOConfig``)
and backend strings in the grammar of ``areal/api/alloc_mode.py``
(``rollout.backend: "sglang:d4t2p1"``, ``actor.backend: "megatron:d2p2t4e4"``);
:func:`export.to_yaml` writes it.
"""

from __future__ import annotations

import math
from typing import Any

import costmodel as cm
from export._src.base import Exporter
from export._src.base import to_yaml
from export._src.common import Layout
from export._src.common import concrete
from export._src.common import kv_cache_dtype
from export._src.common import shares_rollout
from export._src.common import with_layouts
from export._src.nodes import node_layouts
from export._src.refusals import check_sync
from export._src.refusals import refuse_degrees
from export._src.refusals import refuse_remax
from export._src.refusals import refuse_reward_model_and_epochs
from export._src.refusals import same_degrees
from export.areal import record

VERSION = record.PIN

_FW = "AReaL"


def train_backend(lay: Layout, gpus: int, role: str) -> tuple[str, int]:
  """``fsdp:d..t..c..`` (ZeRO-3 without PP/EP) or ``megatron:d..p..t..c..e..``, and dp.

  The dimensions multiply to the pool's GPUs (``world = d * p * t * c``);
  experts fold into them (``e`` adds no GPUs).
  """
  if lay.zero_stage == 3 and lay.pp == 1 and lay.ep == 1:
    dp = gpus // (lay.tp * lay.cp)
    return "fsdp:" + "".join(f"{k}{v}" for k, v in (("d", dp), ("t", lay.tp), ("c", lay.cp))
                             if k == "d" or v > 1), dp
  if lay.zero_stage > 1:
    raise ValueError(f"{_FW}: {role}.train.zero_stage={lay.zero_stage} with pp={lay.pp}, "
                     f"ep={lay.ep}: the fsdp backend has no pipeline or expert parallelism and "
                     "the megatron backend shards optimizer state only (ZeRO-1)")
  dp = gpus // lay.model_parallel
  dims = (("d", dp), ("p", lay.pp), ("t", lay.tp), ("c", lay.cp), ("e", lay.ep))
  return "megatron:" + "".join(f"{k}{v}" for k, v in dims if k == "d" or v > 1), dp


def _megatron_keys(lay: Layout) -> dict[str, Any]:
  m: dict[str, Any] = {"ddp": {"use_distributed_optimizer": lay.zero_stage == 1}}
  if lay.vpp > 1:
    m["virtual_pipeline_parallel_size"] = lay.vpp
  if lay.recompute:
    m["recompute_granularity"] = "full" if lay.recompute == 2 else "selective"
    if lay.recompute == 2:
      m.update(recompute_method="uniform", recompute_num_layers=1)
  return m


def _engine(lay: Layout, gpus: int, role: str, samples: int, n_minibatches: int) -> dict:
  """One train engine: backend string, micro-batches, recompute, offload and swap.

  ``swap`` is the engine's ``offload`` (torch_memory_saver moves its weights
  and optimizer state to the host between uses, rl_trainer.py); the CPU
  optimizer (``offload``) is the fsdp backend's ``fsdp.offload_params``
  (``CPUOffloadPolicy``); the megatron backend has none.
  """
  backend, dp = train_backend(lay, gpus, role)
  per_rank = samples // n_minibatches
  if lay.recompute == 1 and backend.startswith("fsdp"):
    raise ValueError(f"{_FW}: {role}.train.recompute=selective: the fsdp backend has "
                     "gradient_checkpointing on or off; use recompute 'full' or 'none'")
  e: dict[str, Any] = {"backend": backend, "ppo_n_minibatches": n_minibatches,
                       "mb_spec": {"n_mbs": per_rank // dp // lay.micro_batch},
                       "gradient_checkpointing": lay.recompute > 0, "offload": lay.swap}
  if backend.startswith("megatron"):
    if lay.tp > 1 and not lay.sequence_parallel:
      raise ValueError(f"{_FW}: {role}.train.sequence_parallel=False with tp={lay.tp}: the "
                       "megatron backend turns sequence parallelism on with TP "
                       "(megatron_engine.py use_sequence_parallel)")
    if lay.offload:
      raise ValueError(f"{_FW}: {role}.train.offload=1 with the megatron backend: "
                       "MegatronEngineConfig has no CPU optimizer (fsdp.offload_params is the "
                       "fsdp backend's); use zero_stage 3 without pp/ep, or offload 0")
    e["megatron"] = _megatron_keys(lay)
  else:
    refuse_degrees(_FW, f"{role}.train", lay, ("vpp",), "the fsdp backend has no pipeline")
    if lay.offload:
      e["fsdp"] = {"offload_params": True}
  return e


def _advantage_keys(algorithm: str, n: int) -> dict[str, Any]:
  """Reward and advantage normalisation as AReaL's examples/math configs set them.

  GRPO and DAPO normalise rewards per group (``gsm8k_grpo.yaml``), RLOO
  subtracts the leave-one-out group mean (``gsm8k_rloo.yaml``), REINFORCE++
  and PPO normalise advantages over the batch only (``gsm8k_reinforce.yaml``,
  ``gsm8k_ppo.yaml``).
  """
  batch = {"mean_level": "batch", "std_level": "batch"}
  if algorithm in ("grpo", "dapo"):
    return {"reward_norm": {"mean_level": "group", "std_level": "group", "group_size": n},
            "adv_norm": batch}
  if algorithm == "rloo":
    return {"reward_norm": {"mean_level": "group", "mean_leave1out": True, "std_level": None,
                            "group_size": n}, "adv_norm": batch}
  return {"adv_norm": batch}


def to_areal(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> dict[str, Any]:
  """An AReaL experiment config (nested dict) that runs ``plan``.

  The rollout engines (SGLang) take ``rollout.backend: "sglang:d{replicas}t{tp}p{pp}"``
  on their own GPUs (``scheduling_strategy.type: separation``) or on the
  actor's (``colocation`` with ``target: actor``); the actor, reference and
  critic train engines share the actor's GPUs (the reference and critic
  colocated with it). ``rollout.max_head_offpolicyness`` is the staleness (0:
  synchronous). ``mb_spec.n_mbs`` is the number of micro-batches per rank of
  one mini-batch.

  Raises:
    ValueError: naming the setting when AReaL cannot run the plan: ReMax, a
      reward model on GPUs (rewards come from reward functions), a reference
      or critic away from the actor or with another layout, ZeRO-2/3 with
      pipeline or expert parallelism, a colocated engine wider than one GPU
      (the scheduler colocates one rollout worker per training worker), an
      asynchronous plan without partial rollout, pools that are not uniform
      per node, batches that do not split.

  References:
    inclusionAI/AReaL@4aef98d ``areal/api/cli_args.py``,
    ``areal/api/alloc_mode.py``, ``areal/infra/scheduler/local.py``
    (colocation replica count), ``docs/en/algorithms/async.md``.
  """
  c = concrete(plan, job, cluster, _FW, rule_set="areal",
               supports=frozenset({"dp_attention", "engine_precision"}))
  refuse_remax(_FW, c, "actor.reward_norm and adv_norm express GRPO, RLOO and REINFORCE++; "
               "PPO adds a critic")
  refuse_reward_model_and_epochs(_FW, c, "reward functions in the workflow",
                                 "makes one pass per batch (actor.ppo_n_minibatches updates)")
  actor = c.train["actor"]
  same_degrees(_FW, "actor", actor, c.infer["actor"],
               "AReaL computes log-probs with the actor's train engine", state=True)
  for role in ("actor", "critic"):
    if c.has(role) and c.infer[role].micro_batch != c.train[role].micro_batch:
      raise ValueError(f"{_FW}: {role}.infer.micro_batch={c.infer[role].micro_batch} differs "
                       f"from {role}.train.micro_batch={c.train[role].micro_batch}; the engine "
                       "has one mb_spec")
  if c.colocated and not actor.swap:
    raise ValueError(f"{_FW}: actor.train.swap=0 with the rollout on the actor's GPUs: "
                     "colocation offloads the actor while SGLang generates (rl_trainer.py "
                     "_should_offload_actor); use swap 1")
  check_sync(_FW, c, "bucketed", "NCCL buckets (weight_update_mode xccl)")
  gpus = c.pools[c.actor_pool]
  samples = c.prompts * c.n
  nodes = node_layouts({c.actor_pool: gpus, c.rollout_pool: c.pools[c.rollout_pool]}, cluster,
                       _FW)
  del nodes  # AReaL's scheduler places the workers; the pools only need to fit
  e = c.engine
  replicas = c.replicas()
  # DAPO's dynamic sampling: with dynamic_bs a step collects consumer_batch_size groups,
  # accepted or rejected, and trains on the accepted ones, so it generates
  # prompts x oversample groups to keep the plan's prompts on average.
  groups = math.ceil(c.prompts * c.oversample - 1e-6) if c.algorithm == "dapo" else c.prompts
  rollout: dict[str, Any] = {
      "backend": f"sglang:d{replicas}t{e.tp}p{e.pp}",
      "max_head_offpolicyness": c.staleness,
      "consumer_batch_size": groups,
  }
  if c.colocated:
    if e.tp * e.pp != 1:
      raise ValueError(f"{_FW}: engine tp*pp={e.tp * e.pp} on the actor's GPUs: colocation reuses "
                       "the actor's workers one rollout replica each (rollout dp_size must equal "
                       "the actor's world size, scheduler/local.py), so a colocated engine has one "
                       "GPU")
    rollout["scheduling_strategy"] = {"type": "colocation", "target": "actor"}
  else:
    rollout["scheduling_strategy"] = {"type": "separation"}
  if c.staleness and not c.partial_rollout:
    raise ValueError(f"{_FW}: mode.partial_rollout=False with staleness={c.staleness}: AReaL's "
                     "asynchronous rollouts continue interrupted trajectories with new weights "
                     "(partial rollouts, docs/en/algorithms/async.md), which has no switch")
  out: dict[str, Any] = {
      "cluster": {"n_nodes": cluster.nodes, "n_gpus_per_node": cluster.gpus_per_node},
      "train_dataset": {"batch_size": groups, "max_length": c.prompt_len},
      "gconfig": {"n_samples": c.n, "max_new_tokens": c.max_response},
      "rollout": rollout,
      "sglang": {"mem_fraction_static": e.memory_fraction, "max_running_requests": e.max_seqs,
                 "disable_radix_cache": not e.prefix_caching,
                 "disable_cuda_graph": not e.cuda_graphs},
      "actor": _engine(actor, gpus, "actor", samples, c.mini_batches),
  }
  if e.ep > 1:  # SGLangConfig fields go to the server as they are (cli_args.py build_args)
    out["sglang"]["ep_size"] = e.ep
  if e.dp_attention:  # SGLangConfig.dp_size: "only used for dp attention"
    out["sglang"].update(enable_dp_attention=True, dp_size=e.tp)
  kv = kv_cache_dtype(_FW, plan.engine.precision, "sglang.kv_cache_dtype")
  if kv:
    out["sglang"]["kv_cache_dtype"] = kv
  if c.algorithm == "dapo":
    out["dynamic_bs"] = True
  out["actor"].update(_advantage_keys(c.algorithm, c.n))
  if not c.use_reference:  # no ref engine is configured; no KL term
    out["actor"]["kl_ctl"] = 0.0
  colocate = {"type": "colocation", "target": "actor"}
  for role, key in (("reference", "ref"), ("critic", "critic")):
    if not c.has(role):
      continue
    if c.role_pool[role] != c.actor_pool:
      raise ValueError(f"{_FW}: {role} on pool {c.role_pool[role]!r}: AReaL colocates it with "
                       "the actor (scheduling_strategy target: actor)")
    lay = c.train.get(role, c.infer[role])
    same_degrees(_FW, role, actor, lay, "a colocated engine reuses the actor's workers",
                 train_role="actor")
    if role == "critic":
      same_degrees(_FW, role, lay, c.infer[role], "the critic's engine computes its values",
                   state=True)
      section = {**_engine(lay, gpus, "critic", samples, c.mini_batches), "is_critic": True}
    else:
      if lay.offload:
        raise ValueError(f"{_FW}: reference.infer.offload=1: the ref engine moves its weights "
                         "to the host between uses (ref.offload: swap=1) and has no parameters "
                         "streamed from the host")
      section = {"backend": train_backend(lay, gpus, role)[0], "offload": lay.swap}
    out[key] = {**section, "scheduling_strategy": colocate}
  if any(out.get(k, {}).get("offload") for k in ("actor", "ref", "critic")):
    out["enable_offload"] = True  # rl_trainer.py _validate_cfg requires it for any offload
  return out


def as_run(plan: cm.Plan, **_) -> cm.Plan:
  """The plan as AReaL runs it: xccl buckets, the actor offloaded around colocated
  generation, the reference's weights moved to the host rather than streamed."""
  r = plan.role("reference")
  ref = {}
  if r is not None:  # weights off the GPU either way: moved between uses
    lay = r.infer_layout
    # The larger of two 0/1 flags, traceable (a search builds its plans under jit).
    ref["reference"] = {"offload": 0.0, "swap": lay.offload + lay.swap - lay.offload * lay.swap}
  if shares_rollout(plan):
    ref["actor"] = {"swap": 1.0}
  return with_layouts(plan, ref, "bucketed")


EXPORTER = Exporter(name=record.NAME, framework=record.FRAMEWORK, version=VERSION,
                    to_config=to_areal,
                    render_settings=to_yaml, kind="yaml", adapt=as_run,
                    forces={
                        "engine.sync_backend": "weight_update_mode xccl, NCCL buckets",
                        "actor.swap": "rl_trainer.py _should_offload_actor offloads a "
                        "colocated actor while SGLang generates",
                        "reference.swap": "ref.offload moves the reference's weights to the "
                        "host between uses",
                        "reference.offload": "the ref engine has no parameters streamed from "
                        "the host (ref.offload moves them between uses)"})
