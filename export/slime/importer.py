"""Import of a slime run: the argv of ``train.py`` or ``train_async.py``.

Reads the flags of THUDM/slime@624b824 (``slime/utils/arguments.py``) and the
Megatron-LM and SGLang pass-through flags that :func:`export.to_slime`
writes. ``train_async.py`` is one step off-policy (staleness 1). Pools: with
``--colocate`` the actor and the SGLang engines share pool ``all``; otherwise
the actor trains on ``train`` (``--actor-num-nodes x --actor-num-gpus-per-node``)
and the engines take ``gen`` (``--rollout-num-gpus``). The critic (PPO) and
the reference share the actor's GPUs and its Megatron flags; the reference's
weights live in pinned host memory between its passes (``swap``).
``--fp8-format`` with a Megatron-Core ``--fp8-recipe`` is FP8 training (every layout's
precision; :mod:`export._src.fp8_recipes`).
``--optimizer-cpu-offload`` is the CPU optimizer (``offload``), ``--offload-train``
(on by default with ``--colocate``) the actor's ``swap``.

What the flags cannot state: the mean response length, the architecture (a
checkpoint path naming no preset), the accelerator, DAPO's keep rate (taken
from ``--over-sampling-batch-size`` over ``--rollout-batch-size`` unless
``oversample`` is given) and the reference's ZeRO stage and recompute (the
actor's). Without ``--sglang-mem-fraction-static`` the engines take the fraction
SGLang sets itself (:mod:`export.slime.sglang_memory`), noted as not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import costmodel as cm
from export._src import fp8_recipes
from export._src import importing
from export._src import shell
from export._src import speculative_keys
from export._src.importing import choice
from export._src.importing import number
from export.slime import megatron_model
from export.slime import sglang_memory

FW = "slime"
_ALGORITHM = {"grpo": "grpo", "ppo": "ppo", "reinforce_plus_plus": "reinforce_pp"}
# The other estimators of slime/utils/arguments.py @624b824: critic-free group baselines.
_ALIKE = {"gspo": "grpo", "cispo": "grpo", "reinforce_plus_plus_baseline": "reinforce_pp"}
_RECOMPUTE = {None: 0.0, "selective": 1.0, "full": 2.0}
UNEXPRESSED = {"reference.infer": ("zero_stage", "recompute")}
_SWITCHES = frozenset({
    "--colocate", "--sequence-parallel", "--use-distributed-optimizer", "--optimizer-cpu-offload",
    "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer", "--offload-train",
    "--no-offload-train", "--sglang-disable-radix-cache", "--sglang-enable-dp-attention",
    "--use-kl-loss", "--partial-rollout", "--use-rollout-logprobs", "--fp8-param-gather",
    "--offload", "--offload-rollout", "--sglang-disable-decode-cuda-graph",
    "--sglang-disable-prefill-cuda-graph"})
_SCRIPTS = ("train.py", "train_async.py")


def read_source(source: Any) -> tuple[str, dict[str, Any]]:
  """``(script, flags)`` from :func:`export.to_slime`'s ``{"script", "argv"}``, an argv
  list (its first words may name the script) or a launch script."""
  if isinstance(source, dict):
    words = [source.get("script", "train.py"), *source.get("argv", [])]
  elif isinstance(source, (list, tuple)):
    words = list(source)
  else:
    path, _ = importing.read_text(source, FW)
    entry, rest, _ = shell.command(path, lambda w: w.rsplit("/", 1)[-1] in _SCRIPTS,
                                   "'python3 train.py' (or train_async.py)")
    words = [entry, *rest]
  script = next((w.rsplit("/", 1)[-1] for w in words if w.rsplit("/", 1)[-1] in _SCRIPTS),
                "train.py")
  return script, importing.parse_argv(words, _SWITCHES)


def _layout(o: dict, moe: bool, notes: list[str]) -> cm.Parallel:
  """The actor's Megatron layout (the critic and reference take its flags)."""
  tp = number(o, "tensor-model-parallel-size", FW, 1)
  etp = o.get("expert-tensor-parallel-size")
  colocate = bool(o.get("colocate"))
  swap = (colocate or bool(o.get("offload-train"))) and not o.get("no-offload-train")
  granularity = choice(o, "recompute-granularity", FW, _RECOMPUTE)
  precision = cm.Precision()
  if o.get("fp8-format") is not None:  # Megatron-LM's --fp8-recipe defaults to delayed
    precision = fp8_recipes.training(FW, "--fp8-format/--fp8-recipe", o["fp8-format"],
                                     o.get("fp8-recipe", "delayed"),
                                     bool(o.get("fp8-param-gather")), notes)
  return cm.Parallel(
      precision=precision,
      tp=float(tp), pp=float(number(o, "pipeline-model-parallel-size", FW, 1)),
      cp=float(number(o, "context-parallel-size", FW, 1)),
      ep=float(number(o, "expert-model-parallel-size", FW, 1)),
      # Megatron-LM's expert TP defaults to TP
      etp=float((tp if moe else 1) if etp is None else number(
          o, "expert-tensor-parallel-size", FW)),
      sequence_parallel=bool(o.get("sequence-parallel")) if tp > 1 else True,
      zero_stage=1.0 if o.get("use-distributed-optimizer") else 0.0, recompute=granularity,
      offload=1.0 if o.get("optimizer-cpu-offload") else 0.0, swap=1.0 if swap else 0.0,
      micro_batch=float(number(o, "micro-batch-size", FW, 1)))


def _micro(o: dict, seq: float, cp: float) -> float:
  """``--micro-batch-size``, or with ``--use-dynamic-batch-size`` the samples that fill
  ``--max-tokens-per-gpu`` (a sequence split over ``cp`` GPUs)."""
  if o.get("use-dynamic-batch-size") and o.get("max-tokens-per-gpu") is not None:
    return float(max(1, int(number(o, "max-tokens-per-gpu", FW) * cp // seq)))
  return float(number(o, "micro-batch-size", FW, 1))


def _memory_fraction(o: dict, g: importing.Given, actor: cm.ModelSpec, colocated: bool,
                     notes: list[str]) -> float:
  """``--sglang-mem-fraction-static``, else the fraction SGLang sets itself
  (:mod:`export.slime.sglang_memory`)."""
  if o.get("sglang-mem-fraction-static") is not None:
    return float(number(o, "sglang-mem-fraction-static", FW, kind=float, minimum=0))
  pp = number(o, "sglang-pp-size", FW, 1)
  gpu_mib = cm.hardware.get(g.gpu).hbm_bytes / 2**20
  memory_saver = colocated or bool(o.get("offload")) or bool(o.get("offload-rollout"))
  fraction = sglang_memory.static_fraction(
      gpu_mib, tp=number(o, "rollout-num-gpus-per-engine", FW, 1) // pp, pp=pp,
      dp=number(o, "sglang-dp-size", FW, 1), dp_attention=bool(o.get("sglang-enable-dp-attention")),
      mla=bool(actor.kv_lora_rank),
      chunked_prefill=(number(o, "sglang-chunked-prefill-size", FW) if
                       o.get("sglang-chunked-prefill-size") is not None else None),
      max_bs=(number(o, "sglang-cuda-graph-max-bs-decode", FW) if
              o.get("sglang-cuda-graph-max-bs-decode") is not None else None),
      decode_graphs=not o.get("sglang-disable-decode-cuda-graph"),
      prefill_graphs=not (memory_saver or o.get("sglang-disable-prefill-cuda-graph")))
  notes.append(f"sglang-mem-fraction-static: not set; {fraction} is the fraction SGLang "
               f"v0.5.15.post1 sets itself on a {g.gpu} (ServerArgs._handle_gpu_memory_settings)")
  return fraction


def _engine(o: dict, g: importing.Given, colocated: bool, memory_fraction: float) -> cm.Engine:
  kv = o.get("sglang-kv-cache-dtype")
  if kv not in (None, "auto", "fp8_e4m3"):
    raise ValueError(f"{FW}: sglang-kv-cache-dtype={kv!r} is not auto or fp8_e4m3")
  return cm.Engine(
      tp=float(number(o, "rollout-num-gpus-per-engine", FW, 1)),
      ep=float(number(o, "sglang-ep-size", FW, 1)),
      memory_fraction=memory_fraction,
      max_seqs=float(number(o, "sglang-max-running-requests", FW, g.engine_max_seqs)),
      prefix_caching=not o.get("sglang-disable-radix-cache"),
      dp_attention=bool(o.get("sglang-enable-dp-attention")),
      precision=cm.Precision(kv="fp8" if kv == "fp8_e4m3" else None),
      sync_backend="ipc" if colocated else "bucketed")


def read(source: Any, **missing: Any) -> importing.Imported:
  """The job, plan and cluster of a slime run (see the module docstring).

  Raises:
    ValueError: naming the flag and its value where the argv is not a run the cost
      model can read, or the keyword of a fact it lacks.
  """
  script, o = read_source(source)
  o = importing.Tracked(o)
  notes: list[str] = []
  algorithm = importing.estimator(o, "advantage-estimator", FW, _ALGORITHM, _ALIKE, "grpo", notes)
  prompts = number(o, "rollout-batch-size", FW)
  if o.get("dynamic-sampling-filter-path"):
    if algorithm != "grpo":
      raise ValueError(f"{FW}: dynamic-sampling-filter-path with advantage-estimator="
                       f"{o['advantage-estimator']!r}: the cost model's DAPO is grpo")
    algorithm = "dapo"
    if "oversample" not in missing:
      gen = number(o, "over-sampling-batch-size", FW, prompts)
      missing = {**missing, "oversample": gen / prompts}
  g = importing.given(FW, missing)
  path = o.get("hf-checkpoint")
  actor = (None if g.model is not None else
           megatron_model.model_from_flags(o, str(path or "model").rstrip("/").rsplit("/", 1)[-1],
                                           FW))
  actor = actor or importing.model_spec(g.model, "model", path)
  n = number(o, "n-samples-per-prompt", FW, 1)
  gbs = (prompts * n // number(o, "num-steps-per-rollout", FW)
         if o.get("num-steps-per-rollout") is not None else number(o, "global-batch-size", FW))
  if (prompts * n) % gbs:
    raise ValueError(f"{FW}: global-batch-size={gbs} must divide rollout-batch-size x "
                     f"n-samples-per-prompt = {prompts * n}")
  use_ref = bool(o.get("use-kl-loss"))
  prompt = (number(o, "rollout-max-prompt-len", FW) if o.get("rollout-max-prompt-len") else
            importing.unstated_prompt(g, "no --rollout-max-prompt-len", notes))
  job = importing.build_job(FW, g, algorithm, actor, prompts, n, prompt,
                            number(o, "rollout-max-response-len", FW), prompts * n // gbs, 1,
                            use_ref, reward=False)
  colocated = bool(o.get("colocate"))
  train = _layout(o, actor.is_moe, notes)
  train = train.replace(micro_batch=_micro(o, prompt + float(g.response_mean), float(train.cp)))
  pool = "all" if colocated else "train"
  roles = [cm.RolePlan("actor", pool, train=train, infer=train)]
  if use_ref:  # its weights in pinned host memory, switched in for its pass
    roles.append(cm.RolePlan("reference", pool, infer=train.replace(swap=1.0, offload=0.0)))
  if algorithm == "ppo":
    roles.append(cm.RolePlan("critic", pool, train=train, infer=train))
  group = (number(o, "actor-num-nodes", FW, 1), number(o, "actor-num-gpus-per-node", FW, 8))
  pools = [cm.Pool(pool, float(group[0] * group[1]))]
  rollout_gpus = 0
  if not colocated:
    rollout_gpus = number(o, "rollout-num-gpus", FW)
    pools.insert(0, cm.Pool("gen", float(rollout_gpus)))
  mode = cm.Mode(staleness=1 if script == "train_async.py" else 0,
                 partial_rollout=bool(o.get("partial-rollout")),
                 rollout_log_probs=bool(o.get("use-rollout-logprobs")))
  plan = cm.Plan(pools=tuple(pools), roles=tuple(roles), engine=_engine(
                     o, g, colocated, _memory_fraction(o, g, actor, colocated, notes)).replace(
                     speculative=speculative_keys.read_slime(o, g.speculative_acceptance, notes)),
                 rollout_pool="all" if colocated else "gen", mode=mode)
  if g.gpus_per_node is None and "num-gpus-per-node" in o:
    g = dataclasses.replace(g, gpus_per_node=number(o, "num-gpus-per-node", FW))
  cluster = importing.build_cluster(g, [group], rollout_gpus)
  cm.validate_plan(job, plan, cluster)
  return importing.imported(job, plan, cluster, o, _RELEVANT, tuple(notes))


# Flags a cost could depend on: set but read by no rule above, they are listed as not modelled.
_RELEVANT = (r"parallel-size|offload|micro-batch|max-tokens|dynamic-batch|lora|mem-fraction|"
             r"max-running-requests|cuda-graph|num-gpus|num-nodes|recompute|colocate|"
             r"rollout-num-gpus|partial-rollout|fp8|over-sampling|sglang-.*(size|attention)")
