"""Golden estimates: a seeded set of varied plans and the numbers they give.

The cases are built from the public API only (jobs, clusters, pools, role
plans, layouts, engines, modes), so the file outlives any reorganisation of
the code behind :func:`costmodel.estimate`. Each case is either the
estimate's main numbers or the ``ValueError`` that validation raised.

Regenerate (only when a change is meant to move the numbers, and say so in
the commit)::

  python tests/golden_cases.py --write
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

import costmodel as cm

GOLDEN = pathlib.Path(__file__).parent / "data" / "golden_estimates.json"
N_CASES = 320

_MODELS = ("qwen2.5-1.5b", "qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b",
           "mixtral-8x7b", "deepseek-v3", "qwen2.5-32b")
_CLUSTERS = (("H100", 8, 1), ("H100", 8, 2), ("H100", 8, 4), ("A100-80GB", 8, 2),
             ("H800", 8, 8), ("H20", 8, 4), ("GB200", 4, 18), ("H100", 8, 16),
             ("H200", 8, 4), ("H800", 8, 64))
_FAMILIES = ("colocated", "split", "split_async", "split_async_partial", "split3",
             "fuse_inference", "fuse_training", "async2")


def _pow2(rng, hi):
  return float(2 ** rng.integers(0, int(np.log2(hi)) + 1))


def _layout(rng, model, pool_gpus, gpus_per_node, train=True):
  tp = _pow2(rng, min(gpus_per_node, pool_gpus))
  while model.n_heads % tp or pool_gpus % tp:
    tp /= 2
  pp = _pow2(rng, 8)
  while pool_gpus % (tp * pp):
    pp /= 2
  ep = 1.0
  if model.is_moe:
    ep = _pow2(rng, min(64, model.n_experts))
  zero = float(rng.choice([1, 3])) if tp == pp == ep == 1 else 1.0
  return cm.Parallel(tp=tp, pp=pp, ep=ep, micro_batch=_pow2(rng, 16), zero_stage=zero,
                     recompute=float(rng.integers(0, 3)) if train else 0.0,
                     offload=float(rng.random() < 0.2))


def _engine(rng, model, pool_gpus, gpus_per_node):
  tp = _pow2(rng, min(gpus_per_node, pool_gpus))
  while model.n_heads % tp or pool_gpus % tp:
    tp /= 2
  ep = tp if model.is_moe and rng.random() < 0.5 else 1.0
  return cm.Engine(tp=tp, pp=1.0, ep=ep, memory_fraction=float(rng.choice([0.4, 0.6, 0.85])),
                   max_seqs=_pow2(rng, 4096))


def case(i: int):
  """Case ``i``: (name, job, plan, cluster); the plan may be invalid."""
  rng = np.random.default_rng(1000 + i)
  hw, gpn, nodes = _CLUSTERS[rng.integers(len(_CLUSTERS))]
  cluster = cm.Cluster(cm.hardware.get(hw), gpus_per_node=gpn, nodes=nodes)
  model = cm.models.get(_MODELS[rng.integers(len(_MODELS))])
  algo = ("ppo", "grpo", "dapo", "reinforce_pp", "rloo", "remax")[rng.integers(6)]
  family = _FAMILIES[rng.integers(len(_FAMILIES))]
  if family in ("split3", "fuse_training"):
    algo = "ppo"
  reward = cm.models.get("qwen2.5-1.5b") if algo == "ppo" and rng.random() < 0.4 else None
  mean = float(rng.choice([300.0, 1000.0, 2000.0, 4000.0]))
  job = cm.RLJob(algo, model, prompts_per_step=float(rng.choice([32, 64, 128, 512])),
                 samples_per_prompt=float(rng.choice([1, 4, 8, 16])),
                 prompt_len=float(rng.choice([256, 1024, 2048])),
                 response=cm.ResponseLength.from_mean_max(mean, mean * float(
                     rng.choice([2.0, 4.0, 8.0]))),
                 reward_model=reward, ppo_epochs=int(rng.integers(1, 3)),
                 mini_batches=int(rng.choice([1, 2, 4])),
                 oversample=float(rng.choice([1.0, 1.5])) if algo == "dapo" else 1.0)
  n = cluster.n_gpus
  roles = [r for r in ("actor", "reference", "critic", "reward")
           if (r != "reference" or job.use_reference) and (r != "critic" or job.has_critic)
           and (r != "reward" or job.has_reward_model)]
  mode = cm.Mode()
  if family in ("colocated", "fuse_inference", "fuse_training"):
    pools = {"all": float(n)}
    rollout, where = "all", dict.fromkeys(roles, "all")
    mode = cm.Mode(fuse_inference=family == "fuse_inference",
                   fuse_training=family == "fuse_training")
  elif family == "split3":
    g = float(max(1, n // 4))
    a = float(max(1, (n - g) // 2))
    pools = {"gen": g, "actor": a, "critic": float(n - g - a)}
    rollout = "gen"
    where = {r: ("actor" if r in ("actor", "reference") else "critic") for r in roles}
  else:
    g = float(rng.choice([n // 4, n // 2, 3 * n // 4]) or 1)
    g = min(max(g, 1.0), n - 1.0)
    pools = {"gen": g, "train": float(n - g)}
    rollout, where = "gen", dict.fromkeys(roles, "train")
    if family == "split_async":
      mode = cm.Mode(staleness=1)
    elif family == "split_async_partial":
      mode = cm.Mode(staleness=1, partial_rollout=True)
    elif family == "async2":
      mode = cm.Mode(staleness=2)
  models = {"actor": job.actor, "reference": job.actor, "critic": job.critic,
            "reward": job.reward_model}
  role_plans = []
  for r in roles:
    p = pools[where[r]]
    if r in ("actor", "critic"):
      role_plans.append(cm.RolePlan(r, where[r], train=_layout(rng, models[r], p, gpn),
                                    infer=_layout(rng, models[r], p, gpn, train=False)))
    else:
      role_plans.append(cm.RolePlan(r, where[r], infer=_layout(rng, models[r], p, gpn,
                                                               train=False)))
  plan = cm.Plan(pools=tuple(cm.Pool(k, v) for k, v in pools.items()), roles=tuple(role_plans),
                 engine=_engine(rng, job.actor, pools[rollout], gpn), rollout_pool=rollout,
                 mode=mode)
  return f"{i:03d}-{family}-{algo}-{model.name}-{hw}x{n}", job, plan, cluster


def outputs(job, plan, cluster) -> dict:
  """The numbers the golden file keeps, or the validation error."""
  try:
    est = cm.estimate(job, plan, cluster)
  except ValueError as e:
    return {"error": str(e)}
  f = lambda x: np.asarray(x, dtype=np.float64).tolist()
  return {"stage_names": list(est.stage_names), "stage_pools": list(est.stage_pools),
          "step_time_s": f(est.step_time_s), "start_s": f(est.start_s),
          "end_s": f(est.end_s), "time_parts_s": f(est.time_parts_s),
          "memory_bytes": f(est.memory_bytes), "memory_limit_bytes": f(est.memory_limit_bytes),
          "pool_busy_s": f(est.pool_busy_s), "lower_bound_s": f(est.lower_bound_s),
          "mfu": f(est.mfu), "feasible": bool(np.asarray(est.feasible)),
          "gen_concurrency": f(est.gen_concurrency), "memory_excess": f(est.memory_excess)}


def main(argv):
  if "--write" not in argv:
    print(__doc__)
    return 2
  out = {}
  for i in range(N_CASES):
    name, job, plan, cluster = case(i)
    out[name] = outputs(job, plan, cluster)
  GOLDEN.parent.mkdir(exist_ok=True)
  GOLDEN.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
  valid = sum("error" not in v for v in out.values())
  print(f"wrote {GOLDEN} ({len(out)} cases, {valid} valid)")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
