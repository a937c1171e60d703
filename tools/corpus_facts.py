"""The facts an example file states, read from its keys, and their check against an import.

Used by ``tools/corpus_check.py``. A fact is what a file says outright: its GPU
count, the training backend, the actor's parallel degrees, the engine's tensor
parallelism, the LoRA rank, the token budget of a dynamic batch, the samples
per step. Each is read here from the file's own keys (through the importers'
source readers, which evaluate scripts and compose configs but interpret
nothing) and compared with what the import made of it.
"""

from __future__ import annotations

import os
import re

import export
from export.areal import importer as import_areal
from export.nemo_rl import importer as import_nemo_rl
from export.openrlhf import importer as import_openrlhf
from export.slime import importer as import_slime
from export.verl import importer as import_verl


def is_candidate(framework: str, rel: str) -> bool:
  """Whether the file at ``rel`` (relative to the checkout) is an example to try."""
  if framework == "verl":
    return rel.startswith("examples/") and rel.endswith(".sh")
  if framework == "openrlhf":
    return rel.startswith("examples/scripts/") and rel.endswith(".sh")
  if framework == "nemo_rl":
    return (rel.startswith("examples/configs/") and rel.endswith(".yaml")
            and "/evals/" not in rel)
  if framework == "slime":
    return re.fullmatch(r"scripts/(low_precision/)?run[-_].*\.sh", rel) is not None
  if framework == "areal":
    return rel.startswith("examples/") and rel.endswith(".yaml")
  raise ValueError(f"framework={framework!r} is not one of {export.IMPORT_FRAMEWORKS}")


# ----- what each file states --------------------------------------------------------------


def _int(v):
  try:
    return int(float(v))
  except (TypeError, ValueError):
    return None


def stated(framework: str, path: str) -> dict | None:
  """``{fact: value}`` the file states, or None when it is no RL run (SFT, DPO, reward
  model training, generation only)."""
  return {"verl": _verl, "openrlhf": _openrlhf, "nemo_rl": _nemo_rl, "slime": _slime,
          "areal": _areal}[framework](path)


def _verl(path):
  try:
    o = import_verl.read_source(path)
  except ValueError as e:
    if "runs no" in str(e):
      return None
    raise
  if not re.search(r"main_ppo|fully_async_main|_main$", str(o.get("hydra.module", ""))):
    return None
  f = {}
  groups = [("trainer.nnodes", "trainer.n_gpus_per_node")]
  if "rollout.nnodes" in o:  # the async recipes' own rollout GPUs
    groups.append(("rollout.nnodes", "rollout.n_gpus_per_node"))
  elif str(o.get("trainer.v1.trainer_mode")) == "separate_async":
    groups.append(("actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"))
  rm = "reward.reward_model"
  if str(o.get(f"{rm}.enable")) == "True" and str(o.get(f"{rm}.enable_resource_pool")) == "True":
    groups.append((f"{rm}.nnodes", f"{rm}.n_gpus_per_node"))
  gpus = [_int(o.get(a, 1)) * _int(o.get(b, 8)) for a, b in groups
          if None not in (_int(o.get(a, 1)), _int(o.get(b, 8)))]
  if len(gpus) == len(groups):
    f["GPUs"] = sum(gpus)
  a = "actor_rollout_ref.actor"
  engine = o.get("model_engine") or ("megatron" if "megatron" in str(
      o.get("hydra.config_name", "")) else None)
  strategy = o.get(f"{a}.strategy") or {"megatron": "megatron"}.get(engine, "fsdp")
  f["backend"] = "megatron" if strategy == "megatron" else "fsdp"
  if strategy == "megatron":
    for k, name in (("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"),
                    ("expert", "ep")):
      v = o.get(f"{a}.megatron.{k}_model_parallel_size")
      if v is not None:
        f[f"actor {name}"] = _int(v)
  else:
    v = o.get(f"{a}.ulysses_sequence_parallel_size",
              o.get(f"{a}.fsdp_config.ulysses_sequence_parallel_size",
                    o.get(f"{a}.veomni.ulysses_parallel_size",
                          o.get(f"{a}.fsdp_config.turbo_config.distributed."
                                "ulysses_parallel_size"))))
    if v is not None:
      f["actor cp"] = _int(v)
  v = o.get("actor_rollout_ref.rollout.tensor_model_parallel_size")
  ep = _int(o.get("actor_rollout_ref.rollout.expert_parallel_size", 1)) or 1
  if ep > (_int(v) if v is not None else 2):  # experts across DP ranks: E GPUs per engine
    f["engine ep"] = ep
  elif v is not None:
    f["engine tp"] = _int(v)
  f["lora rank"] = _int(o.get("actor_rollout_ref.model.lora_rank", 0)) or 0
  if str(o.get(f"{a}.use_dynamic_bsz")) == "True" and o.get(
      f"{a}.ppo_micro_batch_size_per_gpu") is None:
    f["actor token budget"] = _int(o.get(f"{a}.ppo_max_token_len_per_gpu", 16384))
  return f


def _openrlhf(path):
  try:
    o = import_openrlhf.read_source(path)
  except ValueError as e:
    if "runs no" in str(e):
      return None
    raise
  f = {}
  for k, name in (("actor.num_nodes", "nodes"), ("actor.num_gpus_per_node", "per node")):
    if k in o:
      f[f"actor {name}"] = _int(o[k])
  if "vllm.tensor_parallel_size" in o:
    f["engine tp"] = _int(o["vllm.tensor_parallel_size"])
  if "ds.tensor_parallel_size" in o:
    f["actor tp"] = _int(o["ds.tensor_parallel_size"])
  f["lora rank"] = _int(o.get("lora.rank", 0)) or 0
  return f


def _nemo_rl(path):
  c = import_nemo_rl.read_source(path)
  if not any(k.startswith(("grpo.", "ppo.")) for k in c) or any(
      k.startswith(("distillation.", "sft.", "dpo.", "rm.")) for k in c):
    return None
  f = {"GPUs": _int(c.get("cluster.num_nodes", 1)) * _int(c.get("cluster.gpus_per_node", 8))}
  p = "policy"
  mega = str(c.get(f"{p}.megatron_cfg.enabled")) == "True"
  f["backend"] = "megatron" if mega else "fsdp"
  if mega:
    for k, name in (("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"),
                    ("expert", "ep")):
      v = c.get(f"{p}.megatron_cfg.{k}_model_parallel_size")
      if v is not None:
        f[f"actor {name}"] = _int(v)
  else:
    v = c.get(f"{p}.dtensor_cfg.tensor_parallel_size")
    if v is not None:
      f["actor tp"] = _int(v)
  backend = c.get(f"{p}.generation.backend", "vllm")
  v = {"sglang": c.get(f"{p}.generation.sglang_cfg.tp_size"),
       "trtllm": c.get(f"{p}.generation.trtllm_cfg.tensor_parallel_size"),
       "megatron": None}.get(backend, c.get(f"{p}.generation.vllm_cfg.tensor_parallel_size"))
  if v is not None:
    f["engine tp"] = _int(v)
  lora = f"{p}.megatron_cfg.peft" if mega else f"{p}.dtensor_cfg.lora_cfg"
  f["lora rank"] = _int(c.get(f"{lora}.dim", 0)) if str(c.get(f"{lora}.enabled")) == "True" else 0
  return f


def _slime(path):
  try:
    script, o = import_slime.read_source(path)
  except ValueError as e:
    if "runs no" in str(e):
      return None
    raise
  if o.get("sft") or "sft" in os.path.basename(path):
    return None
  f = {"backend": "megatron"}
  for k, name in (("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"), ("expert", "ep")):
    v = o.get(f"{k}-model-parallel-size")
    if v is not None:
      f[f"actor {name}"] = _int(v)
  nodes, per = _int(o.get("actor-num-nodes", 1)), _int(o.get("actor-num-gpus-per-node", 8))
  rollout = 0 if o.get("colocate") else _int(o.get("rollout-num-gpus", 0))
  if nodes and per and rollout is not None:
    f["GPUs"] = nodes * per + rollout
  if o.get("use-dynamic-batch-size") and o.get("max-tokens-per-gpu"):
    f["actor token budget"] = _int(o["max-tokens-per-gpu"])
  return f


def _areal(path):
  c = import_areal.read_source(path)
  if not any(k.startswith("actor.") for k in c) or "rollout.backend" not in c and not any(
      k.startswith("rollout.") for k in c):
    return None
  f = {}
  if "allocation_mode" in c:
    f["allocation"] = str(c["allocation_mode"])
  if c.get("actor.mb_spec.max_tokens_per_mb") is not None:
    f["actor token budget"] = _int(c["actor.mb_spec.max_tokens_per_mb"])
  return f


# ----- the check ------------------------------------------------------------------------------


def _imported(fact: str, imp) -> object:
  job, plan, cluster = imp
  actor = next(r for r in plan.roles if r.role == "actor")
  t = actor.train
  if fact == "GPUs":
    return int(sum(float(p.gpus) for p in plan.pools))
  if fact == "backend":  # a plan states ZeRO stages: FSDP shards (2, 3), Megatron does not
    return "megatron" if float(t.zero_stage) <= 1 else "fsdp"
  if fact.startswith("actor ") and fact[6:] in ("tp", "pp", "cp", "ep"):
    return int(float(getattr(t, fact[6:])))
  if fact == "engine tp":
    return int(float(plan.engine.tp))
  if fact == "engine ep":
    return int(float(plan.engine.ep))
  if fact == "lora rank":
    return int(float(job.lora.rank)) if job.lora is not None else 0
  if fact == "actor token budget":
    seq = float(job.prompt_len) + float(job.response.mean)
    return float(t.micro_batch) * seq / float(t.cp)  # a sequence splits over its CP ranks
  if fact in ("actor nodes", "actor per node", "allocation"):
    return None
  raise ValueError(f"fact={fact!r} has no reading of an import")


def compare(facts: dict, imp) -> list[str]:
  """The facts the import does not keep, one ``fact: stated X, imported Y`` each."""
  lost = []
  for fact, want in facts.items():
    if want is None:
      continue
    got = _imported(fact, imp)
    if got is None:
      continue
    if fact == "actor token budget":
      ok = got <= want * 1.0001
    elif fact == "backend" and got != want:  # one GPU a replica: ZeRO 0 either way
      ok = float(imp.plan.roles[0].train.zero_stage) == 0 and want == "fsdp"
    else:
      ok = got == want
    if not ok:
      lost.append(f"{fact}: stated {want}, imported {got:g}" if isinstance(got, float) else
                  f"{fact}: stated {want}, imported {got}")
  return lost
