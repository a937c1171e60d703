"""Checks of exported command lines (OpenRLHF, slime) against the pinned flags.

argparse is rebuilt from the extracted flags (names, types, actions, choices), the
argv is parsed with it, and the framework's own assertions on the parsed values
are applied; each ``check_*`` returns the problems found.
"""

from __future__ import annotations

import argparse
from typing import Any

from framework_checks import load


def _parser(flags: dict[str, dict]) -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
  types = {"int": int, "float": float, "str": str}
  for name, spec in flags.items():
    kw: dict[str, Any] = {}
    action = spec.get("action")
    if action in ("store_true", "store_false"):
      kw["action"] = action
    elif action == "argparse.BooleanOptionalAction":
      kw["action"] = argparse.BooleanOptionalAction
    else:
      kw["type"] = types.get(spec.get("type", "str"), str)
      if isinstance(spec.get("choices"), list):
        kw["choices"] = spec["choices"]
      if "nargs" in spec:
        kw["nargs"] = spec["nargs"]
    p.add_argument(name, dest=name[2:], **kw)
  return p


def parse_cli(flags: dict[str, dict], argv: list[str],
              passthrough: dict[str, str] | None = None) -> tuple[dict, list[str]]:
  """Parses ``argv`` with the extracted flags; unknown flags must be pass-through ones."""
  p = _parser(flags)
  for name, arity in (passthrough or {}).items():
    if name not in p._option_string_actions:  # pylint: disable=protected-access
      p.add_argument(name, dest=name[2:], **({"type": str} if arity == "value"
                                              else {"action": "store_true"}))
  try:
    ns, rest = p.parse_known_args(argv)
  except (argparse.ArgumentError, SystemExit) as e:
    return {}, [f"argparse: {e}"]
  bad = [f"{x}: not a flag of this version" for x in rest]
  return {k: v for k, v in vars(ns).items()}, bad


def check_openrlhf(argv: list[str]) -> list[str]:
  """Flags of train_ppo_ray.py and its assertions on them."""
  a, bad = parse_cli(load("openrlhf")["flags"], argv)
  if bad:
    return bad
  given = {x for x in argv if x.startswith("--")}

  def g(name, default=None):
    return a.get(name) if f"--{name}" in given else default

  actor = g("actor.num_nodes", 1) * g("actor.num_gpus_per_node", 8)
  engines, vtp = g("vllm.num_engines"), g("vllm.tensor_parallel_size", 1)
  async_ = g("train.async_enable", False)
  if g("train.colocate_all") and not async_ and engines and actor != engines * vtp:
    bad.append("colocate_all: actor GPUs != vllm.num_engines x tensor_parallel_size")
  def group(role):
    return g(f"{role}.num_nodes", 1), g(f"{role}.num_gpus_per_node", 8)

  colocate_ref = g("train.colocate_actor_ref") or g("train.colocate_all")
  if colocate_ref and g("algo.kl.init_coef", 0.01) > 0 and group("actor") != group("ref"):
    bad.append("colocate actor/ref: the same num_nodes and num_gpus_per_node")
  if g("train.colocate_critic_reward") and group("critic") != group("reward"):
    bad.append("colocate critic/reward: the same num_nodes and num_gpus_per_node")
  tp, ring = g("ds.tensor_parallel_size", 1), g("ds.ring_attn_size", 1)
  if tp > 1 and g("ds.zero_stage", 2) > 2:
    bad.append("DeepSpeed AutoTP (ds.tensor_parallel_size > 1) with ZeRO-3")
  if g("vllm.enable_sleep") and async_:
    bad.append("async with vllm.enable_sleep")
  if g("train.partial_rollout_enable") and not async_:
    bad.append("partial_rollout_enable without async_enable")
  batch, n = g("rollout.batch_size", 1024), g("rollout.n_samples_per_prompt", 1)
  if (g("rollout.vllm_generate_batch_size") or batch) > batch and not async_:
    bad.append("vllm_generate_batch_size > rollout.batch_size without async")
  if g("algo.advantage.estimator", "gae") in ("rloo", "reinforce_baseline", "group_norm",
                                             "dr_grpo") and n <= 1:
    bad.append("group estimator with n_samples_per_prompt 1")
  micro = g("rollout.micro_batch_size", 8)
  if n * batch // micro < actor // ring // tp:
    bad.append("fewer sample batches than actor processes")
  tbs, tmicro = g("train.batch_size", 128), g("train.micro_batch_size", 1)
  dp = actor // (ring * tp)
  if tbs % dp or (tbs // dp) % tmicro:
    bad.append(f"train.batch_size={tbs} over dp={dp} by micro={tmicro}")
  return bad


def check_slime(settings: dict) -> list[str]:
  """slime flags and the Megatron/SGLang pass-through flags its scripts (or, for SGLang's,
  its docs) use."""
  d = load("slime")
  if settings["script"] not in d["entry_points"]:
    return [f"{settings['script']}: not an entry point"]
  argv = settings["argv"]
  passthrough = {**d["script_flags"], **{f: v["arity"] for f, v in d["doc_flags"].items()}}
  a, bad = parse_cli(d["flags"], argv, passthrough)
  if bad:
    return bad
  given = {x for x in argv if x.startswith("--")}

  def g(name, default=None):
    return a.get(name) if f"--{name}" in given else default

  def num(name, default):
    return int(g(name, default))

  if settings["script"] == "train_async.py" and g("colocate"):
    bad.append("train_async.py asserts not --colocate")
  per_engine = num("rollout-num-gpus-per-engine", 1)
  actor = num("actor-num-nodes", 1) * num("actor-num-gpus-per-node", 8)
  rollout = num("rollout-num-gpus", actor) if not g("colocate") else actor
  if rollout % per_engine:
    bad.append("rollout GPUs not a multiple of rollout-num-gpus-per-engine")
  tp, pp, cp = (num(f"{k}-parallel-size", 1) for k in ("tensor-model", "pipeline-model",
                                                        "context"))
  if actor % (tp * pp * cp):
    bad.append("actor GPUs not a multiple of tp x pp x cp")
  dp = actor // (tp * pp * cp)
  ep = num("expert-model-parallel-size", 1)
  if (actor // pp) % (ep * num("expert-tensor-parallel-size", 1)):
    bad.append("expert parallel group does not divide the ranks of a pipeline stage")
  gbs, micro = num("global-batch-size", 0), num("micro-batch-size", 1)
  if gbs % (dp * micro):
    bad.append(f"global-batch-size={gbs} over dp={dp} x micro={micro}")
  rbs, n = num("rollout-batch-size", 0), num("n-samples-per-prompt", 1)
  if (rbs * n) % gbs:
    bad.append("rollout samples not a whole number of global batches")
  if num("over-sampling-batch-size", rbs) < rbs:
    bad.append("over-sampling-batch-size < rollout-batch-size (arguments.py)")
  return bad
