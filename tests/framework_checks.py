"""Checks of exported config files (veRL overrides, NeMo-RL and AReaL YAML) against
the frameworks' own keys and assertions; ``cli_checks`` checks the command lines.

The key and flag lists come from ``tests/data/framework_keys/<framework>_<commit>.json``
(written by ``tools/extract_framework_keys.py`` from the pinned sources). Each
``check_*`` returns the problems it finds (an empty list when the settings would be
accepted): unknown keys or flags, values of the wrong type, and the runtime
assertions the framework makes on them, each named with its source file.
"""

from __future__ import annotations

import functools
import glob
import json
import math
import os
import re
from typing import Any

DATA = os.path.join(os.path.dirname(__file__), "data", "framework_keys")


@functools.cache
def load(framework: str) -> dict:
  paths = glob.glob(os.path.join(DATA, f"{framework}_*.json"))
  if len(paths) != 1:
    raise FileNotFoundError(f"expected one {framework}_<commit>.json in {DATA}, found {paths}")
  with open(paths[0], encoding="utf-8") as f:
    return json.load(f)


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and v:
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def type_ok(kind: str, v: Any) -> bool:
  """Whether value ``v`` fits a key whose default is of ``kind`` (as extracted)."""
  if kind in ("null", "interpolation", "missing"):
    return True
  if v is None:
    return False
  if kind == "bool":
    return isinstance(v, bool)
  if kind == "int":
    return isinstance(v, int) and not isinstance(v, bool)
  if kind == "float":
    return isinstance(v, (int, float)) and not isinstance(v, bool)
  if kind == "str":
    return isinstance(v, str)
  if kind == "list":
    return isinstance(v, list)
  return False  # "dict": an open node takes no dotted override without "+"


# ----- veRL ----------------------------------------------------------------------


def config_keys(framework: str, config: str) -> dict[str, str]:
  """The keys of ``framework``'s ``config``: its defaults' keys (in order), then its own."""
  cfg = load(framework)["configs"][config]
  keys = {}
  for base in cfg["defaults"]:
    keys.update(config_keys(framework, base))
  keys.update(cfg["keys"])
  return keys


def verl_trainer(o: dict) -> str:
  if "async_training.staleness_threshold" in o:
    return "fully_async"
  if "rollout.nnodes" in o:
    return "one_step_off"
  return "main"


# Keys a recipe reads with ``is not None`` (fully_async_rollouter.py), so null is meant.
_VERL_NULLABLE = {"rollout.total_rollout_steps"}


def _verl_dp(o: dict, role: str) -> int:
  world = o["trainer.nnodes"] * o["trainer.n_gpus_per_node"]
  if o.get(f"{role}.strategy", o.get("actor_rollout_ref.actor.strategy")) == "megatron":
    m = f"{role}.megatron"
    return world // (o[f"{m}.tensor_model_parallel_size"] * o[f"{m}.pipeline_model_parallel_size"]
                     * o[f"{m}.context_parallel_size"])
  return world // o.get(f"{role}.ulysses_sequence_parallel_size", 1)


def check_verl(o: dict) -> list[str]:
  """Keys of the trainer's config, types, and veRL's runtime assertions."""
  trainer = verl_trainer(o)
  megatron = o.get("actor_rollout_ref.actor.strategy") == "megatron"
  config = {"main": "ppo_trainer", "fully_async": "fully_async_ppo_trainer",
            "one_step_off": "one_step_off_ppo_trainer"}[trainer]
  if megatron:
    config = config.replace("ppo_trainer", "ppo_megatron_trainer")
  keys = config_keys("verl", config)
  bad = []
  for k, v in o.items():
    if k.startswith("+"):  # Hydra adds a key under an open dict node (``+a.b.c=v``)
      parents = [k[1:].rsplit(".", i)[0] for i in range(1, k.count("."))]
      if not any(keys.get(p) == "dict" for p in parents):
        bad.append(f"{k}: no open dict node of {config} above it")
      continue
    if k not in keys:
      bad.append(f"{k}: not a key of {config}")
    elif not (type_ok(keys[k], v) or (v is None and k in _VERL_NULLABLE)):
      bad.append(f"{k}={v!r}: the config's default is {keys[k]}")
  if bad:
    return bad
  a = "actor_rollout_ref.actor"
  if o.get("algorithm.adv_estimator", "gae") not in load("verl")["adv_estimators"]:
    bad.append(f"algorithm.adv_estimator={o['algorithm.adv_estimator']!r}: not an "
               "AdvantageEstimator (core_algos.py)")
  if "trainer.use_v1" not in o:
    bad.append("trainer.use_v1 must be set: it defaults to True at this commit")
  n = o["actor_rollout_ref.rollout.n"]
  for role, micro_key in ((a, f"{a}.ppo_micro_batch_size_per_gpu"),
                          ("critic", "critic.ppo_micro_batch_size_per_gpu")):
    if role == "critic" and "critic.strategy" not in o:
      continue
    samples = o[f"{a}.ppo_mini_batch_size"] * n
    dp, micro = _verl_dp(o, role), o[micro_key]
    if samples % dp or (samples // dp) % micro:  # workers/config/actor.py, critic.py
      bad.append(f"{role}: ppo_mini_batch_size x n = {samples} over dp={dp} by micro={micro}")
  tbs = o["data.train_batch_size"]
  v1 = o.get("trainer.use_v1")
  rm = o.get("reward.reward_model.enable", False)
  rm_pool = o.get("reward.reward_model.enable_resource_pool", False)
  if trainer == "main" and tbs < o[f"{a}.ppo_mini_batch_size"]:
    bad.append("data.train_batch_size < ppo_mini_batch_size (actor.py validate)")
  if v1 and o.get("trainer.v1.trainer_mode") == "separate_async":
    if tbs != o["trainer.v1.separate_async.parameter_sync_step"] * o[f"{a}.ppo_mini_batch_size"]:
      bad.append("train_batch_size != parameter_sync_step x ppo_mini_batch_size "
                 "(trainer_separate_async.py)")
    if not (o.get("actor_rollout_ref.rollout.nnodes", 0) > 0
            and o.get("actor_rollout_ref.rollout.n_gpus_per_node", 0) > 0):
      bad.append("separate_async needs actor_rollout_ref.rollout.nnodes/n_gpus_per_node > 0")
    if o.get("actor_rollout_ref.rollout.checkpoint_engine.backend", "naive") == "naive":
      bad.append("separate_async needs a checkpoint engine other than naive")
    t = o.get("trainer.v1.sampler.max_off_policy_threshold", 8)
    if not (isinstance(t, int) and t > 0):  # replay_buffer.py
      bad.append(f"max_off_policy_threshold={t} must be an integer > 0")
    if rm and not rm_pool:
      bad.append("separate_async: the reward model needs enable_resource_pool")
  if trainer in ("fully_async", "one_step_off") and o.get("actor_rollout_ref.hybrid_engine",
                                                          True):
    bad.append(f"{trainer}: asserts not hybrid_engine")
  if trainer == "fully_async":  # fully_async_rollouter.py
    if tbs != 0 or o.get("data.gen_batch_size") != 1:
      bad.append("fully_async asserts data.train_batch_size == 0 and data.gen_batch_size == 1")
    if o["async_training.staleness_threshold"] < 0 or o[
        "async_training.trigger_parameter_sync_step"] < 1:
      bad.append("fully_async: staleness_threshold >= 0 and trigger_parameter_sync_step >= 1")
    if "rollout.total_rollout_steps" not in o:
      bad.append("fully_async: rollout.total_rollout_steps left at the recipe's 100 samples")
    if rm and not rm_pool:
      bad.append("fully_async: the reward model needs enable_resource_pool")
  if o.get("algorithm.filter_groups.enable"):
    if not o.get("algorithm.filter_groups.metric"):
      bad.append("filter_groups.enable needs filter_groups.metric (v1 trainer_base.py)")
    if v1 and rm and not rm_pool:
      bad.append("filter_groups with a colocated reward model (v1 trainer_base.py)")
  ep = o.get("actor_rollout_ref.rollout.expert_parallel_size", 1)
  if ep > 1 and ep != o["actor_rollout_ref.rollout.tensor_model_parallel_size"]:
    bad.append("rollout expert_parallel_size != tp x data_parallel_size (config/rollout.py)")
  return bad


# ----- NeMo-RL ----------------------------------------------------------------------


_NEMO_TYPED = (  # section of a config -> the typed configs that declare its fields
    (r"(policy|value)\.dtensor_cfg", ("DTensorConfig",)),
    (r"(policy|value)\.megatron_cfg\.optimizer", ("MegatronOptimizerConfig",)),
    (r"(policy|value)\.megatron_cfg\.distributed_data_parallel_config", ("MegatronDDPConfig",)),
    (r"(policy|value)\.megatron_cfg", ("MegatronConfig",)),
    (r"(policy|value)\.sequence_packing", ("SequencePackingConfig",)),
    (r"policy\.generation\.vllm_cfg", ("VllmSpecificArgs", "vllm_cfg_read")),
    (r"(policy|value)", ("PolicyConfig",)),
    (r"grpo\.async_grpo", ("AsyncGRPOConfig",)),
    (r"grpo", ("GRPOConfig",)),
    (r"ppo\.async_ppo", ("AsyncPPOConfig",)),
    (r"ppo", ("PPOConfig",)),
)


def _nemo_typed(key: str) -> tuple[bool, str | None]:
  """Whether a typed config declares ``key``, and its annotation if it has one."""
  d = load("nemo_rl")
  parent, leaf = key.rsplit(".", 1)
  for pattern, classes in _NEMO_TYPED:
    if re.fullmatch(pattern, parent):
      for cls in classes:
        if cls == "vllm_cfg_read":
          if leaf in d["vllm_cfg_read"]:
            return True, None
        elif leaf in d["typed"].get(cls, {}):
          return True, d["typed"][cls][leaf]
      return False, None
  return False, None


def annotation_ok(ann: str, v: Any) -> bool:
  """Whether ``v`` fits a Python annotation such as ``float``, ``int | None``, ``bool``."""
  want = [t for t in ("bool", "int", "float", "str") if re.search(rf"\b{t}\b", ann)]
  if v is None:
    return "None" in ann or "Optional" in ann
  return not want or any(type_ok(t, v) for t in want) or (
      "Literal" in ann and repr(v) in ann)


def check_nemo_rl(cfg: dict) -> list[str]:
  """Keys of the ``defaults:`` config (or its typed configs), types, and NeMo-RL's checks."""
  d = load("nemo_rl")
  base = str(cfg.get("defaults", "")).removesuffix(".yaml")
  if base not in d["configs"]:
    return [f"defaults={cfg.get('defaults')!r}: not one of {sorted(d['configs'])}"]
  keys = config_keys("nemo_rl", base)
  rm_env = {k: v for k, v in config_keys("nemo_rl", "grpo_rm_1B").items()
            if k.startswith("env.reward_model.")}
  nulls = {k for c in d["configs"] for k, v in config_keys("nemo_rl", c).items() if v == "null"}
  bad = []
  flat = flatten({k: v for k, v in cfg.items() if k != "defaults"})
  for k, v in flat.items():
    if k.startswith("policy.generation.vllm_kwargs."):
      # a keyword of vLLM's own (nested values such as speculative_config.model are not)
      if k.split(".")[3] in d["vllm_kwargs_reserved"]:
        bad.append(f"{k}: vllm_worker.py already passes this keyword to vLLM")
      continue
    kind = keys.get(k) or rm_env.get(k)
    declared, ann = _nemo_typed(k)
    if kind is None and v is None and k in nulls:
      continue
    if kind is None and not declared:
      bad.append(f"{k}: not a key of {base} nor of its typed config")
    elif ann is not None:
      if not annotation_ok(ann, v):
        bad.append(f"{k}={v!r}: declared {ann}")
    elif kind is not None and not type_ok(kind, v):
      bad.append(f"{k}={v!r}: the config's default is {kind}")
    if "use_custom_fsdp" in k:
      bad.append(f"{k}: never read by nemo_rl/models/megatron/setup.py")
  if bad:
    return bad
  gpn, nodes = cfg["cluster"]["gpus_per_node"], cfg["cluster"]["num_nodes"]
  colo = cfg["policy"]["generation"]["colocated"]
  alg = cfg.get("grpo") or cfg.get("ppo")
  async_on = alg.get("async_grpo", alg.get("async_ppo", {})).get("enabled", False)
  if async_on and colo["enabled"]:
    bad.append("asynchronous GRPO/PPO needs non-colocated generation")
  if not colo["enabled"]:
    res = colo["resources"]
    if nodes == 1 and not (res["gpus_per_node"] and res["num_nodes"] in (None, 1)):
      bad.append("one node: generation gpus_per_node > 0 and num_nodes 1 (grpo.py setup)")
    if nodes > 1 and res["gpus_per_node"] != gpn:
      bad.append("several nodes: generation gpus_per_node == cluster.gpus_per_node")
  for sec in ("policy", "value"):
    p = cfg.get(sec)
    if not p:
      continue
    dt, mg = p.get("dtensor_cfg", {}), p.get("megatron_cfg", {})
    if dt.get("enabled") == mg.get("enabled"):
      bad.append(f"{sec}: exactly one of dtensor_cfg and megatron_cfg must be enabled")
    if dt.get("enabled") and dt.get("context_parallel_size", 1) > 1 and p.get(
        "sequence_packing", {}).get("enabled", True):
      bad.append(f"{sec}: context parallelism on DTensor needs sequence_packing.enabled false")
    opt = mg.get("optimizer", {})
    if opt.get("optimizer_cpu_offload") and not (
        opt.get("use_distributed_optimizer") and 0 < opt.get("optimizer_offload_fraction", 0) <= 1):
      bad.append(f"{sec}: optimizer_cpu_offload needs the distributed optimizer and 0 < fraction "
                 "<= 1 (megatron/setup.py)")
  return bad


# ----- AReaL --------------------------------------------------------------------------


def parse_backend(s: str, inference: bool) -> tuple[str, dict[str, int]] | None:
  t = load("areal")["allocation_terminals"]
  names = t["INFER_BACKEND" if inference else "TRAIN_BACKEND"]
  letters = "".join(t["INF_DIM_TYPE" if inference else "DIM_TYPE"])
  m = re.fullmatch(rf"({'|'.join(names)}):((?:[{letters}][1-9][0-9]*)+)", s)
  if not m:
    return None
  dims = {k: int(v) for k, v in re.findall(r"([a-z])([0-9]+)", m.group(2))}
  return m.group(1), dims


def check_areal(cfg: dict) -> list[str]:
  """Keys of GRPOConfig, backend strings in the allocation grammar, scheduler rules."""
  d = load("areal")
  keys = d["config_keys"]
  bad = []
  for k, v in flatten(cfg).items():
    ann = keys.get(k)
    if ann is None:
      bad.append(f"{k}: not a key of GRPOConfig")
      continue
    if not annotation_ok(ann, v):
      bad.append(f"{k}={v!r}: declared {ann}")
  if bad:
    return bad
  worlds, all_dims = {}, {}
  for role in ("rollout", "actor", "ref", "critic"):
    if role not in cfg:
      continue
    parsed = parse_backend(cfg[role]["backend"], inference=role == "rollout")
    if parsed is None:
      bad.append(f"{role}.backend={cfg[role]['backend']!r}: not in the allocation grammar")
      continue
    all_dims[role] = parsed[1]
    worlds[role] = math.prod(parsed[1].get(x, 1) for x in "dtpc")
  for role, dims in all_dims.items():
    if dims.get("e", 1) > 1 and worlds[role] % (dims.get("p", 1) * dims["e"]):
      bad.append(f"{role}: pp x ep does not divide the world size (alloc_mode.py)")
    vpp = cfg[role].get("megatron", {}).get("virtual_pipeline_parallel_size", 1)
    if vpp > 1 and dims.get("p", 1) <= 1:
      bad.append(f"{role}: virtual pipeline needs p > 1 (alloc_mode.py)")
    st = cfg[role].get("scheduling_strategy", {})
    if st.get("type", "separation") not in d["scheduling_strategy_types"]:
      bad.append(f"{role}.scheduling_strategy.type={st.get('type')!r}")
    if st.get("type") == "colocation":
      target = st.get("target")
      if target not in cfg:
        bad.append(f"{role}: colocation target {target!r} is not a role")
      elif role == "rollout" and dims.get("d", 1) != worlds.get(target):
        bad.append("rollout colocated: dp_size must equal the target's world size "
                   "(scheduler/local.py)")
      elif role != "rollout" and worlds[role] != worlds.get(target):
        bad.append(f"{role} colocated: world size differs from {target}'s")
  off = cfg["rollout"].get("max_head_offpolicyness", 0)
  if not (isinstance(off, int) and off >= 0):
    bad.append(f"max_head_offpolicyness={off!r}")
  colocated = cfg["rollout"].get("scheduling_strategy", {}).get("type") == "colocation"
  offloads = colocated or any(cfg.get(r, {}).get("offload") for r in ("actor", "ref", "critic"))
  if offloads and not cfg.get("enable_offload"):  # rl_trainer.py _validate_cfg
    bad.append("colocation or an engine's offload needs enable_offload=True")
  return bad
