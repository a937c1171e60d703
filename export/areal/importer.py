"""Import of an AReaL run: its experiment config (YAML or a nested dict).

Reads the keys of inclusionAI/AReaL@4aef98d (``areal/api/cli_args.py``,
``GRPOConfig``) that :func:`export.to_areal` writes, and the backend strings of
``areal/api/alloc_mode.py`` (``rollout.backend: "sglang:d4t2p1"``,
``actor.backend: "megatron:d2p2t4e4"``). Pools: with ``scheduling_strategy``
``colocation`` the SGLang engines share the actor's pool ``all``; otherwise
they take ``gen`` and the actor, reference and critic ``train``, except on
one node whose GPUs each side asks for whole: AReaL's local launcher hands
them out round-robin, so both share ``all`` (time-shared, on-policy, noted).
An engine's
``offload`` is its ``swap`` (colocation always offloads the actor); the fsdp
backend's ``fsdp.offload_params`` is the CPU optimizer (``offload``).
``rollout.max_head_offpolicyness`` is the staleness; asynchronous rollouts are
partial.

What the config cannot state: the mean response length, the architecture (a
model path naming no preset), the accelerator, DAPO's keep rate (with
``dynamic_bs`` a step generates ``consumer_batch_size`` groups and trains on
the kept ones: ``oversample`` is required), and the reference's micro-batch,
ZeRO stage and recompute (the actor's).
"""

from __future__ import annotations

import math
import re
from typing import Any

import costmodel as cm
from export._src import compose
from export._src import importing
from export._src.importing import flag
from export._src.importing import number

FW = "AReaL"
UNEXPRESSED = {"reference.infer": ("micro_batch", "zero_stage", "recompute")}
_BACKEND = re.compile(r"(fsdp|megatron|archon|sglang|vllm):((?:[a-z][1-9][0-9]*)+)")


def read_source(source: Any) -> dict[str, Any]:
  """Flat ``{dotted key: value}`` of a nested dict or a YAML file (composed and
  interpolated: :mod:`export._src.compose`)."""
  if isinstance(source, dict):
    return importing.flatten(source)
  return compose.read(source, FW, inherit=False)


_HYBRID = re.compile(r"(megatron):\(attn:((?:[a-z][1-9][0-9]*)+)\|ffn:((?:[a-z][1-9][0-9]*)+)\)")


def _dims(text: str) -> dict[str, int]:
  return {k: int(x) for k, x in re.findall(r"([a-z])([0-9]+)", text)}


def _backend(o: dict, key: str) -> tuple[str, dict[str, int]]:
  v = o.get(key)
  h = _HYBRID.fullmatch(v) if isinstance(v, str) else None
  if h:  # alloc_mode.py's hybrid MoE layout: attention d/p/t/c, experts e and their own t
    attn, ffn = _dims(h.group(2)), _dims(h.group(3))
    if ffn.get("p", 1) != attn.get("p", 1):
      raise ValueError(f"{FW}: {key}={v!r}: attention and experts must share the pipeline")
    return h.group(1), {**attn, "e": ffn.get("e", 1), "etp": ffn.get("t", 1)}
  m = _BACKEND.fullmatch(v) if isinstance(v, str) else None
  if m is None:
    raise ValueError(f"{FW}: {key}={v!r} is not a backend string like 'sglang:d4t2' or "
                     "'megatron:d2p2t2' (areal/api/alloc_mode.py)")
  return m.group(1), {k: int(x) for k, x in re.findall(r"([a-z])([0-9]+)", m.group(2))}


def _layout(o: dict, role: str, samples: int, trained: bool, seq: float = 1.0,
            notes: list[str] | None = None) -> tuple[cm.Parallel, int]:
  """A train engine's layout and its GPUs (``d x p x t x c``). The ``archon`` engine
  (areal/experimental/engine/archon_engine.py @4aef98d: FSDP2 over the data-parallel ranks,
  ``archon.offload_params``) with data and context parallelism only is FSDP; its TP, PP
  and EP meshes have no layout in the cost model."""
  kind, dims = _backend(o, f"{role}.backend")
  if kind in ("sglang", "vllm"):
    raise ValueError(f"{FW}: {role}.backend={o[f'{role}.backend']!r} is an inference backend")
  if kind == "archon":
    if set(dims) - {"d", "c"}:
      raise ValueError(f"{FW}: {role}.backend={o[f'{role}.backend']!r}: the archon engine's "
                       "TP, PP and EP meshes have no layout in the cost model (d and c only)")
    if notes is not None:
      notes.append(f"{role}.backend={o[f'{role}.backend']!r}: the archon engine costed as "
                   "FSDP over its data-parallel ranks (its own kernels not modelled)")
  tp, pp, cp, ep = (dims.get(k, 1) for k in "tpce")
  gpus = dims.get("d", 1) * pp * tp * cp
  f: dict[str, Any] = dict(tp=tp, pp=pp, cp=cp, ep=ep, swap=float(flag(o, f"{role}.offload", FW)))
  if "etp" in dims:
    f["etp"] = dims["etp"]
  m = f"{role}.megatron"
  if kind in ("fsdp", "archon"):
    f.update(zero_stage=3, offload=float(flag(o, f"{role}.{kind}.offload_params", FW)),
             recompute=2.0 if flag(o, f"{role}.gradient_checkpointing", FW) else 0.0)
  else:
    granularity = o.get(f"{m}.recompute_granularity", "full")
    f.update(zero_stage=1 if flag(o, f"{m}.ddp.use_distributed_optimizer", FW, True) else 0,
             vpp=number(o, f"{m}.virtual_pipeline_parallel_size", FW, 1),
             recompute={"full": 2.0, "selective": 1.0}.get(granularity, 0.0) if flag(
                 o, f"{role}.gradient_checkpointing", FW) else 0.0)
  if trained:
    mini = number(o, f"{role}.ppo_n_minibatches", FW, 1)
    per_rank = samples // mini // max(1, gpus // (tp * pp * cp))
    micro = per_rank // number(o, f"{role}.mb_spec.n_mbs", FW, 1)
    if o.get(f"{role}.mb_spec.max_tokens_per_mb") is not None:  # packed micro-batches
      micro = min(micro, math.floor(number(o, f"{role}.mb_spec.max_tokens_per_mb", FW) / seq))
    f["micro_batch"] = max(1, micro)
  return cm.Parallel(**{k: float(v) for k, v in f.items()}), gpus


def _allocation(o: dict) -> dict:
  """``allocation_mode: "sglang:d2t2+d4"`` (areal/api/alloc_mode.py: the rollout's engine
  and layout, then the trainer's, FSDP when unnamed) as ``rollout.backend`` and
  ``actor.backend``, where the config does not name those."""
  mode = o.get("allocation_mode")
  if o.get("rollout.backend") is not None or not isinstance(mode, str) or "+" not in mode:
    return o
  gen, train = (x.strip() for x in mode.split("+", 1))
  o = dict(o)
  o["rollout.backend"] = gen
  if o.get("actor.backend") is None:
    o["actor.backend"] = train if ":" in train else f"fsdp:{train}"
  for role in ("ref", "critic"):
    if f"{role}.path" in o and o.get(f"{role}.backend") is None:
      o[f"{role}.backend"] = o["actor.backend"]
  return o


def _algorithm(o: dict) -> str:
  if "critic.backend" in o:
    return "ppo"
  if o.get("actor.reward_norm.mean_leave1out"):
    return "rloo"
  if o.get("actor.reward_norm.std_level") == "group":
    return "dapo" if flag(o, "dynamic_bs", FW) else "grpo"
  return "reinforce_pp"


def read(source: Any, **missing: Any) -> importing.Imported:
  """The job, plan and cluster of an AReaL config (see the module docstring).

  Raises:
    ValueError: naming the key and its value, or the keyword of a missing fact.
  """
  o = importing.Tracked(_allocation(read_source(source)))
  algorithm = _algorithm(o)
  groups = number(o, "train_dataset.batch_size", FW)
  notes: list[str] = []
  if algorithm == "dapo" and "oversample" not in missing:
    # dynamic_bs generates batch_size groups a step and trains on those the filter keeps;
    # no config states the keep rate: every group is assumed kept (the most training)
    missing = {**missing, "oversample": 1.0}
    notes.append(f"dynamic_bs: the share of the {groups} groups the filter keeps is not "
                 "stated; all assumed kept (oversample=)")
  g = importing.given(FW, missing)
  prompts = round(groups / g.oversample) if algorithm == "dapo" else groups
  if algorithm == "dapo" and math.ceil(prompts * g.oversample - 1e-6) != groups:
    raise ValueError(f"{FW}: oversample={g.oversample!r} does not give "
                     f"train_dataset.batch_size={groups} groups from a whole number of prompts")
  actor_model = importing.model_spec(g.model, "model", o.get("actor.path"))
  n = number(o, "gconfig.n_samples", FW, 1)
  use_ref = "ref.backend" in o
  prompt = (_prompt_within_budget(o, number(o, "train_dataset.max_length", FW), notes)
            if o.get("train_dataset.max_length") is not None else
            importing.unstated_prompt(g, "no train_dataset.max_length", notes))
  job = importing.build_job(FW, g, algorithm, actor_model, prompts, n, prompt,
                            _max_new_tokens(o, prompt),
                            number(o, "actor.ppo_n_minibatches", FW, 1), 1, use_ref, reward=False)
  samples = prompts * n
  kind, dims = _backend(o, "rollout.backend")
  if kind not in ("sglang", "vllm"):
    raise ValueError(f"{FW}: rollout.backend={o['rollout.backend']!r} is a training backend")
  colocated = o.get("rollout.scheduling_strategy.type", "separation") == "colocation"
  nodes, per_node = number(o, "cluster.n_nodes", FW, 1), number(o, "cluster.n_gpus_per_node", FW, 8)
  wrapped = not colocated and _wraps(o, nodes, per_node)
  if wrapped:
    gpus_s = f"{per_node} GPU" + ("s" if per_node > 1 else "")
    notes.append(f"rollout.backend={o['rollout.backend']!r} and actor.backend="
                 f"{o['actor.backend']!r} each take the node's {gpus_s}: AReaL's "
                 "local launcher hands out the visible GPUs round-robin, so the rollout "
                 "engine and the trainer share them (costed colocated, time-shared, "
                 "without offload)")
  pool = "all" if colocated or wrapped else "train"
  seq = float(job.prompt_len) + float(g.response_mean)
  actor, gpus = _layout(o, "actor", samples, trained=True, seq=seq, notes=notes)
  if colocated:  # colocation offloads the actor while SGLang generates
    actor = actor.replace(swap=1.0)
  roles = [cm.RolePlan("actor", pool, train=actor, infer=actor)]
  if use_ref:
    ref, _ = _layout(o, "ref", samples, trained=False, notes=notes)
    roles.append(cm.RolePlan("reference", pool, infer=ref.replace(
        micro_batch=actor.micro_batch, zero_stage=actor.zero_stage, recompute=actor.recompute)))
  if algorithm == "ppo":
    critic, _ = _layout(o, "critic", samples, trained=True, seq=seq, notes=notes)
    roles.append(cm.RolePlan("critic", pool, train=critic, infer=critic))
  tp, pp = dims.get("t", 1), dims.get("p", 1)
  engine = _sglang(o, g, dims) if kind == "sglang" else _vllm(o, g, dims)
  pools = [cm.Pool(pool, float(gpus))]
  if pool != "all":
    pools.insert(0, cm.Pool("gen", float(dims.get("d", 1) * tp * pp)))
  staleness = number(o, "rollout.max_head_offpolicyness", FW, 0, minimum=0)
  if wrapped and staleness:
    notes.append(f"rollout.max_head_offpolicyness={staleness}: the engine and the trainer "
                 "run at once on the GPUs they share; the cost model runs one at a time "
                 "there, on-policy (the overlap is not modelled)")
    staleness = 0
  plan = cm.Plan(pools=tuple(pools), roles=tuple(roles), engine=engine,
                 rollout_pool="all" if pool == "all" else "gen",
                 mode=cm.Mode(staleness=staleness, partial_rollout=staleness > 0))
  cluster = importing.build_cluster(g, [(nodes, per_node)])
  cm.validate_plan(job, plan, cluster)
  return importing.imported(job, plan, cluster, o, _RELEVANT, tuple(notes))


def _wraps(o, nodes: int, per_node: int) -> bool:
  """Whether a separated allocation wraps onto one node's GPUs: on one node
  AReaL's local launcher and scheduler hand out the visible GPUs round-robin
  (``areal/infra/launcher/local.py`` ``submit_array``,
  ``areal/infra/scheduler/local.py`` ``_allocate_gpus``), so a rollout engine
  and a trainer that each ask for the whole node share its GPUs."""
  _, train = _backend(o, "actor.backend")
  _, gen = _backend(o, "rollout.backend")
  size = lambda d: math.prod(d.get(c, 1) for c in "dtpc")
  return nodes == 1 and size(gen) == per_node and size(train) == per_node


# GenerationHyperparameters (areal/api/cli_args.py @4aef98d): max_new_tokens 16,384 by
# default, and max_tokens (prompt and response together) 32,768.
_GCONFIG_DEFAULTS = {"gconfig.max_new_tokens": 16384, "gconfig.max_tokens": 32768}


def _prompt_within_budget(o: dict, prompt: int, notes: list[str]) -> int:
  """``train_dataset.max_length`` (the longest prompt kept), at most the actor's token
  budget less the longest response: AReaL refuses a sequence longer than
  ``mb_spec.max_tokens_per_mb`` (``areal/utils/seqpack.py`` ``ffd_allocate``), so in a
  run that runs every prompt and its response fit in it (noted when it binds)."""
  if o.get("actor.mb_spec.max_tokens_per_mb") is None:
    return prompt
  budget = number(o, "actor.mb_spec.max_tokens_per_mb", FW, minimum=1)
  new = number(o, "gconfig.max_new_tokens", FW, _GCONFIG_DEFAULTS["gconfig.max_new_tokens"])
  if prompt + new <= budget or budget <= new:
    return prompt
  notes.append(f"prompt length: train_dataset.max_length={prompt} with gconfig.max_new_tokens="
               f"{new} exceeds actor.mb_spec.max_tokens_per_mb={budget}, which AReaL refuses "
               f"for any sequence; prompts taken as at most {budget - new} tokens")
  return budget - new


def _max_new_tokens(o: dict, prompt: int) -> int:
  """The longest response: ``gconfig.max_new_tokens``, at most ``gconfig.max_tokens`` less the
  prompt (each at its default where the config leaves it out)."""
  new = number(o, "gconfig.max_new_tokens", FW, _GCONFIG_DEFAULTS["gconfig.max_new_tokens"])
  total = number(o, "gconfig.max_tokens", FW, _GCONFIG_DEFAULTS["gconfig.max_tokens"])
  if total <= prompt:
    raise ValueError(f"{FW}: gconfig.max_tokens={total} leaves no response after a "
                     f"{prompt}-token prompt")
  return min(new, total - prompt)


# Keys a cost could depend on: set but read by no rule above, they are listed as not modelled.
_RELEVANT = (r"offload|parallel|mb_spec|max_tokens|lora|mem_fraction|gpu_memory_utilization|"
             r"max_num_seqs|max_running_requests|cuda_graph|enforce_eager|n_gpus|n_nodes|"
             r"offpolicyness|recompute|checkpointing|backend|scheduling_strategy|dynamic_bs")


def _sglang(o: dict, g: importing.Given, dims: dict) -> cm.Engine:
  kv = o.get("sglang.kv_cache_dtype", "auto")
  if kv not in ("auto", "fp8_e4m3"):
    raise ValueError(f"{FW}: sglang.kv_cache_dtype={kv!r} is not auto or fp8_e4m3")
  return cm.Engine(
      tp=float(dims.get("t", 1)), pp=float(dims.get("p", 1)),
      ep=float(number(o, "sglang.ep_size", FW, 1)),
      memory_fraction=float(number(o, "sglang.mem_fraction_static", FW, kind=float, minimum=0)),
      max_seqs=float(number(o, "sglang.max_running_requests", FW, g.engine_max_seqs)),
      prefix_caching=not flag(o, "sglang.disable_radix_cache", FW),
      cuda_graphs=not flag(o, "sglang.disable_cuda_graph", FW),
      dp_attention=flag(o, "sglang.enable_dp_attention", FW),
      precision=cm.Precision(kv="fp8" if kv == "fp8_e4m3" else None), sync_backend="bucketed")


def _vllm(o: dict, g: importing.Given, dims: dict) -> cm.Engine:
  """AReaL's vLLM engine: the ``vllm.*`` keys of ``vLLMConfig`` (areal/api/cli_args.py
  @4aef98d; defaults 0.9, 256, prefix caching off by ``no_enable_prefix_caching``)."""
  return cm.Engine(
      tp=float(dims.get("t", 1)), pp=float(dims.get("p", 1)),
      memory_fraction=float(number(o, "vllm.gpu_memory_utilization", FW, 0.9, kind=float,
                                   minimum=0)),
      max_seqs=float(number(o, "vllm.max_num_seqs", FW, 256)),
      prefix_caching=not flag(o, "vllm.no_enable_prefix_caching", FW, True),
      cuda_graphs=not flag(o, "vllm.enforce_eager", FW), sync_backend="bucketed")

