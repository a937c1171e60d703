"""Import of a veRL run: Hydra overrides, a launch script or a YAML config.

Reads the keys of verl-project/verl@1dda039 that :func:`export.to_verl`
writes (the trainer YAML files ``verl/trainer/config/_generated_ppo_trainer.yaml``
and ``_generated_ppo_megatron_trainer.yaml``); a key left out takes the
default of those files. Placement follows the trainer: the hybrid engine or
v1 ``sync`` (every role on one pool ``all``), v1 ``separate_async`` or the
``fully_async_policy`` / ``one_step_off_policy`` recipes (rollout on pool
``gen``, training on ``train``), and a reward model with
``enable_resource_pool`` on pool ``rm``.

What the overrides cannot state: the mean response length, the model's
architecture (a model path naming no preset), the accelerator, and for the
reward model its micro-batch, sharding and recompute (a served vLLM model
batches requests itself; they are taken from the actor's inference layout).
With ``use_dynamic_bsz`` the micro-batch is the token budget over the mean
sequence (prompt + mean response).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from typing import Any

import yaml

import costmodel as cm
from export._src import engine_kinds
from export._src import importing
from export._src import shell
from export._src.importing import choice
from export._src.importing import flag
from export._src.importing import number
from export.verl import record

FW = "veRL"
_ALGORITHM = {"gae": "ppo", "grpo": "grpo", "reinforce_plus_plus": "reinforce_pp",
              "rloo": "rloo", "remax": "remax"}
# The other estimators of verl/trainer/ppo/core_algos.py @1dda039 (AdvantageEstimator),
# all critic-free group baselines.
_ALIKE = {"reinforce_plus_plus_baseline": "reinforce_pp", "rloo_vectorized": "rloo",
          **{k: "grpo" for k in ("opo", "grpo_passk", "gpg", "grpo_vectorized", "gdpo",
                                 "optimal_token_baseline", "tir_optimal_token_baseline")}}
_RECOMPUTE = {None: 0, "selective": 1, "full": 2}
# Defaults of _generated_ppo_trainer.yaml at 1dda039 for the keys read here.
_E = record.ENGINE_DEFAULTS
_ROLLOUT_DEFAULTS = {"tensor_model_parallel_size": _E.tp, "pipeline_model_parallel_size": 1,
                     "expert_parallel_size": 1, "gpu_memory_utilization": _E.memory_fraction,
                     "max_num_seqs": _E.max_seqs, "enable_prefix_caching": True}
# Fields of a plan the overrides cannot state (taken as documented above).
UNEXPRESSED = {"reward.infer": ("micro_batch", "zero_stage", "recompute", "sequence_parallel")}


# ----- reading the source -------------------------------------------------------------


def _value(text: str) -> Any:
  """A Hydra override's value as YAML reads it (``True``, ``null``, ``0.6``, ``'x'``)."""
  try:
    return yaml.safe_load(text) if text != "" else ""
  except yaml.YAMLError:
    return text


def parse_overrides(words: list[str]) -> dict[str, Any]:
  """``key=value`` words (``+key`` and ``++key`` too) as ``{key: value}``; other words are
  Hydra's own options (``--config-name=...``) and are skipped."""
  out = {}
  for w in words:
    if w.startswith("-") or "=" not in w:
      continue
    key, text = w.split("=", 1)
    out[key.lstrip("+~")] = _value(text)
  return out


def _is_entry(word: str) -> bool:
  """A veRL trainer module (``verl.trainer.main_ppo``, the recipes' ``*_main``)."""
  return bool(re.fullmatch(r"(verl|recipe)\.[\w.]*main\w*", word))


def parse_script(path: str) -> dict[str, Any]:
  """The overrides of the ``python3 -m verl...`` command a launch script runs, with its
  Hydra options (``--config-name``) under ``hydra.config_name``."""
  entry, words, _ = shell.command(path, _is_entry, "'python3 -m verl...'")
  out = parse_overrides(words)
  out["hydra.module"] = entry
  for w in words:
    m = re.fullmatch(r"--config-name(?:=|\s*)(.*)", w)
    if m:
      out["hydra.config_name"] = m.group(1).strip("'\"").removesuffix(".yaml")
  if "--config-name" in words:
    k = words.index("--config-name")
    if k + 1 < len(words):
      out["hydra.config_name"] = words[k + 1].removesuffix(".yaml")
  return out


def read_source(source: Any) -> dict[str, Any]:
  """Overrides from a dict, a list of ``key=value`` words, or a file: YAML (``.yaml``), a
  shell script (``.sh``) or a text file of ``key=value`` words (``#`` comments)."""
  if isinstance(source, (list, tuple)):
    return parse_overrides(list(source))
  if isinstance(source, dict) or str(source).endswith((".yaml", ".yml")):
    # to_verl's overrides name added keys "+a.b"
    return {k.lstrip("+~"): v for k, v in importing.read_yaml(source, FW).items()}
  path, text = importing.read_text(source, FW)
  if path.endswith(".sh") or re.search(r"-m\s+verl\.", text):
    return parse_script(path)
  return parse_overrides(shlex.split(text, comments=True))


# ----- layouts --------------------------------------------------------------------------


def _megatron(o: dict, pre: str, train: bool, base: cm.Parallel, moe: bool) -> cm.Parallel:
  """A Megatron worker's layout: the ``*_offload`` keys are ``swap``, the optimizer's
  ``optimizer_cpu_offload`` override is ``offload``; expert TP null is TP (Megatron's default)."""
  m = f"{pre}.megatron"
  tp = number(o, f"{m}.tensor_model_parallel_size", FW, 1)
  etp = o.get(f"{m}.expert_tensor_parallel_size")
  moved = ("param_offload", "grad_offload", "optimizer_offload") if train else ("param_offload",)
  f = dict(tp=tp, pp=number(o, f"{m}.pipeline_model_parallel_size", FW, 1),
           cp=number(o, f"{m}.context_parallel_size", FW, 1),
           ep=number(o, f"{m}.expert_model_parallel_size", FW, 1),
           vpp=number(o, f"{m}.virtual_pipeline_model_parallel_size", FW, 1),
           etp=(tp if moe else 1) if etp is None else number(
               o, f"{m}.expert_tensor_parallel_size", FW),
           swap=float(any(flag(o, f"{m}.{k}", FW) for k in moved)), offload=0.0)
  if train:
    t = f"{m}.override_transformer_config.recompute_granularity"
    f.update(zero_stage=1 if flag(o, f"{m}.use_distributed_optimizer", FW, True) else 0,
             recompute=choice(o, t, FW, _RECOMPUTE),
             offload=float(flag(o, f"{pre}.optim.override_optimizer_config.optimizer_cpu_offload",
                                FW)))
    if tp > 1:
      f["sequence_parallel"] = flag(o, f"{m}.sequence_parallel", FW, True)
  return base.replace(**{k: float(v) if not isinstance(v, bool) else v for k, v in f.items()})


def _fsdp(o: dict, pre: str, fsdp: str, model: str, train: bool, base: cm.Parallel,
          engine: str = "fsdp") -> cm.Parallel:
  """An FSDP worker's layout: ``param_offload`` / ``optimizer_offload`` are ``swap``, FSDP2's
  ``offload_policy`` is ``offload``; the reference (forward_only) keeps its parameters on the
  host, ``offload`` 1. VeOmni (``engine`` ``veomni``: its ``veomni`` section) and FSDP-Turbo
  (``fsdp_turbo``: ``fsdp_config.turbo_config.distributed``) are FSDP engines too, with their
  own names for the shard group, Ulysses and expert degrees; expert parallelism inside FSDP
  has no layout in the cost model (ZeRO-3 shards over data-parallel ranks only)."""
  if engine == "veomni":
    fsdp = re.sub(r"\.fsdp(_config)?$", ".veomni", fsdp)
    shard, ulysses, experts, policy = (
        f"{fsdp}.fsdp_size", f"{fsdp}.ulysses_parallel_size", f"{fsdp}.expert_parallel_size",
        f"{fsdp}.enable_fsdp_offload")
  elif engine == "fsdp_turbo":
    d = f"{fsdp}.turbo_config.distributed"
    shard, ulysses, experts, policy = (f"{d}.fully_shard_parallel_size",
                                       f"{d}.ulysses_parallel_size",
                                       f"{d}.expert_parallel_size", f"{fsdp}.offload_policy")
  else:
    shard, ulysses, experts, policy = (
        f"{fsdp}.fsdp_size", f"{fsdp}.ulysses_sequence_parallel_size", None,
        f"{fsdp}.offload_policy")
  if experts is not None and number(o, experts, FW, 1) > 1:
    raise ValueError(f"{FW}: {experts}={o[experts]}: expert parallelism inside an FSDP engine "
                     f"({engine}) has no layout in the cost model (ZeRO-3 shards over "
                     "data-parallel ranks only)")
  cp = number(o, f"{pre}.ulysses_sequence_parallel_size", FW, number(o, ulysses, FW, 1))
  f = dict(tp=1.0, pp=1.0, ep=1.0, vpp=1.0, cp=float(cp), offload=1.0, swap=0.0)
  if train:
    zero = 3.0
    if number(o, shard, FW, -1, minimum=None) == 1:
      zero = 0.0
    elif not flag(o, f"{fsdp}.reshard_after_forward", FW, True):
      zero = 2.0
    f.update(zero_stage=zero,
             recompute=2.0 if flag(o, f"{model}.enable_gradient_checkpointing", FW, True) else 0.0,
             offload=float(flag(o, policy, FW)),
             swap=float(max(flag(o, f"{fsdp}.param_offload", FW),  # both read
                            flag(o, f"{fsdp}.optimizer_offload", FW))))
  return base.replace(**f)


def _micro(o: dict, key: str, dynamic_key: str, tokens_key: str, seq_tokens: float,
           default_tokens: int = 16384, fallback: int | None = None) -> float:
  """A micro-batch: the key, else the token budget over the mean sequence (dynamic batches)."""
  if o.get(key) is not None:
    return float(number(o, key, FW))
  if flag(o, dynamic_key, FW, False):
    budget = number(o, tokens_key, FW, default_tokens)
    return float(max(1, math.floor(budget / seq_tokens)))
  if fallback is not None:
    return float(fallback)
  raise ValueError(f"{FW}: {key} is not set and {dynamic_key} is False; veRL needs one of them")


def _dividing(micro: float, samples: int, gpus: int, lay: cm.Parallel, megatron: bool) -> float:
  """The largest micro-batch <= ``micro`` that divides a mini-batch's samples per DP rank."""
  split = float(lay.cp) * (float(lay.tp) * float(lay.pp) if megatron else 1.0)
  per_rank = samples // max(1, int(gpus // split))
  return float(max((d for d in range(1, int(micro) + 1) if per_rank % d == 0), default=1))


def read(source: Any, **missing: Any) -> importing.Imported:
  """The job, plan and cluster of a veRL run (see the module docstring).

  Raises:
    ValueError: naming the key and its value where the overrides are not a
      run the cost model can read, or the keyword of a fact they lack.
  """
  o = importing.Tracked(read_source(source))
  g = importing.given(FW, missing)
  a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
  notes: list[str] = []
  algorithm = importing.estimator(o, "algorithm.adv_estimator", FW, _ALGORITHM, _ALIKE, "gae",
                                  notes)
  if flag(o, "algorithm.filter_groups.enable", FW):
    algorithm = "dapo"
  _default_strategy(o)  # an engine without a layout is refused before its model is read
  actor_model = importing.model_spec(g.model, "model", o.get("actor_rollout_ref.model.path"))
  n = number(o, f"{r}.n", FW, 1)
  prompt_len = number(o, "data.max_prompt_length", FW, 512)
  max_response = number(o, "data.max_response_length", FW, 512)
  mini = number(o, f"{a}.ppo_mini_batch_size", FW, 256)
  prompts = number(o, "data.train_batch_size", FW, 1024, minimum=0)
  if prompts == 0 and not any(k.startswith("async_training.") for k in o):
    raise ValueError(f"{FW}: data.train_batch_size=0 must be >= 1 (0 is read only by the "
                     "fully asynchronous trainer, whose async_training settings set the step)")
  if prompts == 0:  # fully_async: a step is trigger_parameter_sync_step mini-batches
    prompts = mini * number(o, "async_training.trigger_parameter_sync_step", FW, 1) * number(
        o, "async_training.require_batches", FW, 1)
  if prompts % mini:
    raise ValueError(f"{FW}: data.train_batch_size={prompts} is not a multiple of "
                     f"{a}.ppo_mini_batch_size={mini}")
  use_ref = flag(o, f"{a}.use_kl_loss", FW) or flag(o, "algorithm.use_kl_in_reward", FW)
  reward = flag(o, "reward.reward_model.enable", FW)
  rank = number(o, "actor_rollout_ref.model.lora_rank", FW, 0, minimum=0)
  lora = cm.LoRA(rank=float(rank), shared_reference=True) if rank else None
  job = importing.build_job(FW, g, algorithm, actor_model, prompts, n, prompt_len, max_response,
                            prompts // mini, number(o, f"{a}.ppo_epochs", FW, 1), use_ref, reward,
                            lora, o.get("reward.reward_model.model_path"))
  seq = prompt_len + float(g.response_mean)

  strategy = choice(o, f"{a}.strategy", FW, {s: s for s in _STRATEGIES}, _default_strategy(o))
  megatron = strategy == "megatron"
  if strategy in _FSDP_LIKE:
    notes.append(f"{a}.strategy={strategy!r}: costed as veRL's FSDP engine with its shard "
                 f"group, Ulysses degree and offloads ({_FSDP_LIKE[strategy]} not modelled)")

  def layout(pre, fsdp, model, train, base, moe=actor_model.is_moe):
    return (_megatron(o, pre, train, base, moe) if megatron else
            _fsdp(o, pre, fsdp, model, train, base, strategy))

  actor_mb = _micro(o, f"{a}.ppo_micro_batch_size_per_gpu", f"{a}.use_dynamic_bsz",
                    f"{a}.ppo_max_token_len_per_gpu", seq)
  actor_train = layout(a, f"{a}.fsdp_config", "actor_rollout_ref.model", True,
                       cm.Parallel(micro_batch=actor_mb))
  trainer_gpus = number(o, "trainer.nnodes", FW, 1) * number(o, "trainer.n_gpus_per_node", FW, 8)
  if o.get(f"{a}.ppo_micro_batch_size_per_gpu") is None:  # dynamic: a micro-batch that divides
    actor_train = actor_train.replace(micro_batch=_dividing(
        actor_mb, mini * n, trainer_gpus, actor_train, megatron))
  dyn = f"{a}.use_dynamic_bsz"
  actor_infer = actor_train.replace(micro_batch=_micro(
      o, f"{r}.log_prob_micro_batch_size_per_gpu", f"{r}.log_prob_use_dynamic_bsz"
      if f"{r}.log_prob_use_dynamic_bsz" in o else dyn, f"{r}.log_prob_max_token_len_per_gpu",
      seq, fallback=int(actor_mb)))
  roles = [cm.RolePlan("actor", "train", train=actor_train, infer=actor_infer)]
  if use_ref:
    ref = "actor_rollout_ref.ref"
    base = actor_train.replace(micro_batch=_micro(
        o, f"{ref}.log_prob_micro_batch_size_per_gpu", f"{ref}.log_prob_use_dynamic_bsz"
        if f"{ref}.log_prob_use_dynamic_bsz" in o else dyn,
        f"{ref}.log_prob_max_token_len_per_gpu", seq, fallback=int(actor_infer.micro_batch)))
    roles.append(cm.RolePlan("reference", "train",
                             infer=layout(ref, f"{ref}.fsdp_config", None, False, base)))
  if algorithm == "ppo":
    c_mb = _micro(o, "critic.ppo_micro_batch_size_per_gpu", "critic.use_dynamic_bsz"
                  if "critic.use_dynamic_bsz" in o else dyn, "critic.ppo_max_token_len_per_gpu",
                  seq, 32768, fallback=int(actor_mb))
    critic = layout("critic", "critic.fsdp", "critic.model", True,
                    cm.Parallel(micro_batch=c_mb), job.critic.is_moe)
    c_inf = c_mb if megatron else _micro(
        o, "critic.forward_micro_batch_size_per_gpu", "critic.use_dynamic_bsz", "x", seq,
        fallback=int(c_mb))
    roles.append(cm.RolePlan("critic", "train", train=critic, infer=critic.replace(
        micro_batch=c_inf)))

  e = {k: o.get(f"{r}.{k}", v) for k, v in _ROLLOUT_DEFAULTS.items()}
  tp, ep, wide = engine_kinds.expert_data_parallel(
      FW, f"{r}.tensor_model_parallel_size", number(e, "tensor_model_parallel_size", FW),
      f"{r}.data_parallel_size", number(o, f"{r}.data_parallel_size", FW, 1),
      f"{r}.expert_parallel_size", number(e, "expert_parallel_size", FW), notes)
  engine = cm.Engine(tp=float(tp), pp=float(number(e, "pipeline_model_parallel_size", FW)),
                     ep=float(ep), dp_attention=wide,
                     memory_fraction=float(number(e, "gpu_memory_utilization", FW, kind=float,
                                                  minimum=0)),
                     max_seqs=float(number(e, "max_num_seqs", FW)),
                     prefix_caching=flag(e, "enable_prefix_caching", FW),
                     cuda_graphs=not flag(o, f"{r}.enforce_eager", FW, False))
  if o.get(f"{r}.name", "vllm") not in ("vllm", "sglang"):
    raise ValueError(f"{FW}: {r}.name={o[f'{r}.name']!r} is not vllm or sglang")

  trainer = (number(o, "trainer.nnodes", FW, 1), number(o, "trainer.n_gpus_per_node", FW, 8))
  groups = [trainer]
  mode, rollout = _mode(o, job.mini_batches)
  backend = o.get(f"{r}.checkpoint_engine.backend", "naive" if rollout is None else "nccl")
  engine = engine.replace(sync_backend=choice(
      {"b": backend}, "b", FW, {"naive": "per_tensor", "nccl": "bucketed"}))
  if rollout is None:
    pools = [cm.Pool("all", float(trainer[0] * trainer[1]))]
    roles = [dataclasses.replace(x, pool="all") for x in roles]
    rollout_pool = "all"
  else:
    groups.append(rollout)
    pools = [cm.Pool("gen", float(rollout[0] * rollout[1])),
             cm.Pool("train", float(trainer[0] * trainer[1]))]
    rollout_pool = "gen"
  if reward:
    rm = "reward.reward_model"
    rm_layout = actor_infer.replace(
        tp=float(number(o, f"{rm}.rollout.tensor_model_parallel_size", FW, 2)),
        pp=float(number(o, f"{rm}.rollout.pipeline_model_parallel_size", FW, 1)),
        cp=1.0, ep=1.0, vpp=1.0, etp=1.0, offload=0.0,
        swap=float(flag(o, f"{rm}.rollout.free_cache_engine", FW)))
    pool = roles[0].pool
    if flag(o, f"{rm}.enable_resource_pool", FW):
      rm_nodes = (number(o, f"{rm}.nnodes", FW, 1), number(o, f"{rm}.n_gpus_per_node", FW, 8))
      groups.append(rm_nodes)
      pools.append(cm.Pool("rm", float(rm_nodes[0] * rm_nodes[1])))
      pool = "rm"
    roles.append(cm.RolePlan("reward", pool, infer=rm_layout))
  plan = cm.Plan(pools=tuple(pools), roles=tuple(roles), engine=engine,
                 rollout_pool=rollout_pool, mode=mode)
  cluster = importing.build_cluster(g, groups)
  cm.validate_plan(job, plan, cluster)
  return importing.imported(job, plan, cluster, o, _RELEVANT, tuple(notes))


# Keys a cost could depend on: set but read by no rule above, they are listed as not modelled.
_RELEVANT = (r"offload|parallel_size|micro_batch|max_token_len|dynamic_bsz|lora|"
             r"gpu_memory_utilization|max_num_(seqs|batched)|enforce_eager|cudagraph|n_gpus|nnodes|"
             r"staleness|recompute|checkpointing|fsdp_size|strategy|model_engine|"
             r"free_cache_engine|chunked_prefill|multi_turn|\.mode$|\.name$")
_ENGINES = {None: "fsdp", "dp": "fsdp", "fsdp": "fsdp", "megatron": "megatron",
            "veomni": "veomni"}
# FSDP engines read as FSDP layouts, and what of them the cost model leaves out: VeOmni
# (verl/trainer/config/engine/veomni.yaml @1dda039) and FSDP-Turbo
# (docs/advance/fsdp_turbo_backend.rst @1dda039: FSDP over one DeviceMesh with EP and Ulysses).
_FSDP_LIKE = {"veomni": "VeOmni's fused MoE and attention kernels",
              "fsdp_turbo": "FSDP-Turbo's prefetch and module plans"}
_STRATEGIES = ("fsdp", "fsdp2", "megatron", *_FSDP_LIKE)


def _default_strategy(o: dict) -> str:
  """The actor's backend when ``actor.strategy`` is not set: the Hydra ``model_engine`` group
  (``model_engine=megatron``) or the config named by ``--config-name``."""
  engine = o.get("model_engine")
  if engine is None and "megatron" in str(o.get("hydra.config_name", "")):
    engine = "megatron"
  if engine not in _ENGINES:
    raise ValueError(f"{FW}: model_engine={engine!r}: the cost model has layouts for veRL's "
                     "FSDP (dp, veomni) and Megatron engines only")
  return _ENGINES[engine]


def _mode(o: dict, mini_batches: int) -> tuple[cm.Mode, tuple[int, int] | None]:
  """The execution mode and the rollout's own ``(nnodes, per_node)`` (None: colocated)."""
  r = "actor_rollout_ref.rollout"
  if "async_training.staleness_threshold" in o:  # fully_async_policy
    t = float(number(o, "async_training.staleness_threshold", FW, kind=float, minimum=0))
    partial = flag(o, "async_training.partial_rollout", FW, True)
    calls = number(o, "async_training.require_batches", FW, 1)
    # A fractional threshold bounds the queue below a whole step (Mode.staleness_threshold).
    mode = cm.Mode(staleness=max(1, math.ceil(t)) if t else 0, partial_rollout=partial,
                   staleness_threshold=None if t.is_integer() else t,
                   require_batches=None if calls == mini_batches else calls)
    return mode, _nodes(o, "rollout")
  if "rollout.nnodes" in o:  # one_step_off_policy
    return cm.Mode(staleness=1), _nodes(o, "rollout")
  use_v1 = flag(o, "trainer.use_v1", FW, True)
  mode = o.get("trainer.v1.trainer_mode", "sync") if use_v1 else "hybrid"
  if mode in ("sync", "hybrid"):
    if not flag(o, "actor_rollout_ref.hybrid_engine", FW, True):
      raise ValueError(f"{FW}: actor_rollout_ref.hybrid_engine=False with the main trainer has "
                       "no rollout pool in the keys (use the async recipes' rollout.nnodes)")
    return cm.Mode(), None
  if mode != "separate_async":
    raise ValueError(f"{FW}: trainer.v1.trainer_mode={mode!r} is not sync or separate_async "
                     "(colocate_async has no plan in the cost model)")
  t = number(o, "trainer.v1.sampler.max_off_policy_threshold", FW, 8)
  # replay_buffer.py drops a trajectory started at step s when g - s + 1 > threshold.
  return cm.Mode(staleness=t - 1, partial_rollout=True), _nodes(o, r)


def _nodes(o: dict, pre: str) -> tuple[int, int]:
  return (number(o, f"{pre}.nnodes", FW), number(o, f"{pre}.n_gpus_per_node", FW))
