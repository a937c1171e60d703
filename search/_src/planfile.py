"""A plan and its predicted times as a JSON-ready dict, and result tables."""

from __future__ import annotations

import json

import numpy as np

import costmodel as cm

_LAYOUT_FIELDS = ("tp", "pp", "cp", "ep", "micro_batch", "zero_stage", "recompute", "offload",
                  "vpp")


def _num(x) -> float | int:
  v = float(np.asarray(x))
  return int(v) if v == int(v) else v


def _layout(p: cm.Parallel | None) -> dict | None:
  if p is None:
    return None
  return {f: _num(getattr(p, f)) for f in _LAYOUT_FIELDS}


def plan_to_dict(plan: cm.Plan, estimate: cm.Estimate | None = None,
                 family: str | None = None) -> dict:
  """The plan (pools, roles, layouts, engine, mode) and, when given, the
  estimate's predicted times, as plain Python values."""
  out = {
      "family": family,
      "pools": {p.name: _num(p.gpus) for p in plan.pools},
      "rollout_pool": plan.rollout_pool,
      "roles": {r.role: {"pool": r.pool, "train": _layout(r.train),
                         "infer": _layout(r.infer_layout)} for r in plan.roles},
      "engine": {"tp": _num(plan.engine.tp), "pp": _num(plan.engine.pp),
                 "ep": _num(plan.engine.ep),
                 "memory_fraction": round(float(plan.engine.memory_fraction), 4),
                 "max_seqs": _num(plan.engine.max_seqs)},
      "mode": {"name": plan.mode.name, "staleness": plan.mode.staleness,
               "partial_rollout": plan.mode.partial_rollout,
               "fuse_inference": plan.mode.fuse_inference,
               "fuse_training": plan.mode.fuse_training},
  }
  if estimate is not None:
    out["predicted"] = {
        "step_time_s": float(estimate.step_time_s),
        "feasible": bool(np.asarray(estimate.feasible)),
        "tokens_per_s": float(estimate.tokens_per_s),
        "mfu": float(estimate.mfu),
        "lower_bound_s": float(estimate.lower_bound_s),
        "stages": {name: {"pool": estimate.stage_pools[i],
                          "start_s": float(estimate.start_s[i]),
                          "end_s": float(estimate.end_s[i]),
                          "time_s": t}
                   for i, (name, t) in enumerate(estimate.stage_times_s.items())},
    }
  return out


def write_plan(path: str, plan: cm.Plan, estimate: cm.Estimate | None = None,
               family: str | None = None) -> None:
  """Writes :func:`plan_to_dict` as indented JSON to ``path``."""
  with open(path, "w", encoding="utf-8") as f:
    json.dump(plan_to_dict(plan, estimate, family), f, indent=2)
    f.write("\n")


def describe(plan: cm.Plan) -> str:
  """One line: pools, the actor's training layout, the engine, the mode."""
  pools = "+".join(f"{p.name}:{_num(p.gpus)}" for p in plan.pools)
  a = plan.role("actor").train
  actor = (f"actor tp{_num(a.tp)} pp{_num(a.pp)}"
           + (f" cp{_num(a.cp)}" if float(a.cp) > 1 else "")
           + (f" ep{_num(a.ep)}" if float(a.ep) > 1 else "")
           + f" zero{_num(a.zero_stage)} mb{_num(a.micro_batch)}"
           + f" rc{_num(a.recompute)}" + (" off" if float(a.offload) else ""))
  e = plan.engine
  engine = (f"engine tp{_num(e.tp)}" + (f" pp{_num(e.pp)}" if float(e.pp) > 1 else "")
            + (f" ep{_num(e.ep)}" if float(e.ep) > 1 else "")
            + f" mem {float(e.memory_fraction):.2f} seqs {_num(e.max_seqs)}")
  return f"{pools} | {actor} | {engine} | {plan.mode.name}"
