"""Plan files: a plan (and its job, cluster and estimate) as JSON, and back.

:func:`plan_to_dict` writes every field of the plan's dataclasses (pools,
roles with their training and inference layouts, the engine, the mode), so
:func:`plan_from_dict` rebuilds the same plan: ``read_plan(path).plan == plan``
after ``write_plan(path, plan)``. The job and the cluster are written when
given; a model or an accelerator that equals a preset is written as its name,
any other as all of its fields.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from typing import NamedTuple

import numpy as np

import costmodel as cm

FORMAT = 2  # plan files without "format" (version 1) lack fields and cannot be read back


def _num(x) -> float | int:
  v = float(np.asarray(x))
  return int(v) if v.is_integer() else v


def _fields(obj) -> dict[str, Any]:
  """Every dataclass field of ``obj``; numbers as Python numbers."""
  out = {}
  for f in dataclasses.fields(obj):
    v = getattr(obj, f.name)
    if isinstance(v, (bool, str)) or v is None:
      out[f.name] = v
    elif isinstance(v, tuple) and all(isinstance(x, str) for x in v):
      out[f.name] = list(v)
    elif isinstance(v, cm.Hardware):
      out[f.name] = _spec(v, cm.hardware)
    elif dataclasses.is_dataclass(v):
      out[f.name] = _fields(v)
    else:
      out[f.name] = _num(v)
  return out


# Fields that hold a small spec dataclass of their own, written as a dict.
_NESTED = {"precision": cm.Precision, "lora": cm.LoRA, "multi_turn": cm.MultiTurn,
           "speculative": cm.Speculative}


def _build(cls, d: dict, where: str, **nested):
  """``cls(**d)`` with the nested values given, or ValueError naming the field."""
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(d) - names)
  if unknown:
    raise ValueError(f"read_plan: {where} has unknown field(s) {unknown}; "
                     f"{cls.__name__} has {sorted(names)}")
  d = {k: (_build(_NESTED[k], v, f"{where}.{k}") if k in _NESTED and isinstance(v, dict)
           else tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
  try:
    return cls(**{**d, **nested})
  except TypeError as e:
    raise ValueError(f"read_plan: {where}: {e}") from e


# ----- models and accelerators: a preset name, or every field -----------------


def _spec(spec, presets) -> str | dict:
  try:
    if presets.get(spec.name) == spec:
      return spec.name
  except ValueError:
    pass
  return _fields(spec)


def _read_spec(value, cls, presets, where: str):
  if value is None:
    return None
  if isinstance(value, str):
    return presets.get(value)
  return _build(cls, value, where)


# ----- to a dict ----------------------------------------------------------------


def _plan_dict(plan: cm.Plan) -> dict:
  return {
      "pools": {p.name: _num(p.gpus) for p in plan.pools},
      "pool_fields": {p.name: {k: v for k, v in _fields(p).items() if k not in ("name", "gpus")}
                      for p in plan.pools},
      "rollout_pool": plan.rollout_pool,
      "roles": {r.role: {"pool": r.pool,
                         "train": None if r.train is None else _fields(r.train),
                         "infer": None if r.infer is None else _fields(r.infer)}
                for r in plan.roles},
      "engine": _fields(plan.engine),
      "mode": {"name": plan.mode.name, **_fields(plan.mode)},
  }


def _job_dict(job: cm.RLJob) -> dict:
  d = {}
  for f in dataclasses.fields(job):
    v = getattr(job, f.name)
    if f.name in ("actor", "critic", "reward_model"):
      d[f.name] = None if v is None else _spec(v, cm.models)
    elif f.name == "response":
      d[f.name] = [float(k) for k in np.asarray(v.knots, dtype=float)]
    elif dataclasses.is_dataclass(v):
      d[f.name] = _fields(v)
    elif isinstance(v, (bool, str)) or v is None:
      d[f.name] = v
    else:
      d[f.name] = _num(v)
  return d


def plan_to_dict(plan: cm.Plan, estimate: cm.Estimate | None = None,
                 family: str | None = None, job: cm.RLJob | None = None,
                 cluster: cm.Cluster | None = None) -> dict:
  """The plan, and when given its family, job, cluster and predicted times.

  Args:
    plan: A plan (concrete numbers).
    estimate: Its estimate; adds ``predicted`` (step time, stages).
    family: The placement family it was searched in.
    job: The RL job; written so that :func:`plan_from_dict` rebuilds it.
    cluster: The cluster; likewise.

  Returns:
    Plain Python values, ready for :func:`json.dump`.
  """
  out = {"format": FORMAT, "family": family, **_plan_dict(plan)}
  if job is not None:
    out["job"] = _job_dict(job)
  if cluster is not None:
    out["cluster"] = _fields(cluster)
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
               family: str | None = None, job: cm.RLJob | None = None,
               cluster: cm.Cluster | None = None) -> None:
  """Writes :func:`plan_to_dict` as indented JSON to ``path``."""
  with open(path, "w", encoding="utf-8") as f:
    json.dump(plan_to_dict(plan, estimate, family, job, cluster), f, indent=2)
    f.write("\n")


# ----- from a dict --------------------------------------------------------------


class PlanFile(NamedTuple):
  """What a plan file holds: the plan, and what was written with it.

  Attributes:
    plan: The plan.
    job: The RL job, or None when the file has none.
    cluster: The cluster, or None.
    family: The placement family, or None.
    predicted: The predicted times as written (a dict), or None.
  """

  plan: cm.Plan
  job: cm.RLJob | None
  cluster: cm.Cluster | None
  family: str | None
  predicted: dict | None


def _layout(d: dict | None, where: str) -> cm.Parallel | None:
  return None if d is None else _build(cm.Parallel, d, where)


def plan_from_dict(d: dict) -> PlanFile:
  """Rebuilds what :func:`plan_to_dict` wrote.

  Raises:
    ValueError: naming the field when the dict is not a plan file of this
      format, or a value breaks a rule of the plan's dataclasses.
  """
  if not isinstance(d, dict) or d.get("format") != FORMAT:
    got = d.get("format") if isinstance(d, dict) else type(d).__name__
    raise ValueError(f"read_plan: format={got!r} must be {FORMAT} (files written before "
                     "format 2 lack fields a plan needs)")
  for key in ("pools", "rollout_pool", "roles", "engine", "mode"):
    if key not in d:
      raise ValueError(f"read_plan: the plan file has no {key!r}")
  extra = d.get("pool_fields", {})
  pools = tuple(_build(cm.Pool, {"name": name, "gpus": gpus, **extra.get(name, {})},
                       f"pools.{name}") for name, gpus in d["pools"].items())
  roles = tuple(cm.RolePlan(role, r["pool"], train=_layout(r["train"], f"roles.{role}.train"),
                            infer=_layout(r["infer"], f"roles.{role}.infer"))
                for role, r in d["roles"].items())
  mode = {k: v for k, v in d["mode"].items() if k != "name"}
  plan = cm.Plan(pools=pools, roles=roles, engine=_build(cm.Engine, d["engine"], "engine"),
                 rollout_pool=d["rollout_pool"], mode=_build(cm.Mode, mode, "mode"))
  job = cluster = None
  if d.get("job") is not None:
    j = dict(d["job"])
    specs = {k: _read_spec(j.get(k), cm.ModelSpec, cm.models, f"job.{k}")
             for k in ("actor", "critic", "reward_model")}
    response = cm.ResponseLength(knots=np.asarray(j.pop("response"), dtype=float))
    for k in specs:
      j.pop(k, None)
    job = _build(cm.RLJob, j, "job", response=response, **specs)
  if d.get("cluster") is not None:
    c = dict(d["cluster"])
    acc = _read_spec(c.pop("accelerator"), cm.Hardware, cm.hardware, "cluster.accelerator")
    cluster = _build(cm.Cluster, c, "cluster", accelerator=acc)
  return PlanFile(plan, job, cluster, d.get("family"), d.get("predicted"))


def read_plan(path: str) -> PlanFile:
  """Reads a plan file written by :func:`write_plan`.

  Example:
    >>> write_plan("plan.json", plan, job=job, cluster=cluster)  # doctest: +SKIP
    >>> read_plan("plan.json").plan == plan  # doctest: +SKIP
    True
  """
  with open(path, encoding="utf-8") as f:
    try:
      d = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"read_plan: {path} is not JSON: {e}") from e
  return plan_from_dict(d)


def describe(plan: cm.Plan) -> str:
  """One line: pools, the actor's training layout, the engine, the mode."""
  pools = "+".join(f"{p.name}:{_num(p.gpus)}" for p in plan.pools)
  a = plan.role("actor").train
  actor = (f"actor tp{_num(a.tp)} pp{_num(a.pp)}"
           + (f" vpp{_num(a.vpp)}" if float(a.vpp) > 1 else "")
           + (f" cp{_num(a.cp)}" if float(a.cp) > 1 else "")
           + (f" ep{_num(a.ep)}" if float(a.ep) > 1 else "")
           + (f" etp{_num(a.etp)}" if float(a.etp) > 1 else "")
           + f" zero{_num(a.zero_stage)} mb{_num(a.micro_batch)}"
           + f" rc{_num(a.recompute)}" + (" off" if float(a.offload) else ""))
  e = plan.engine
  engine = (f"engine tp{_num(e.tp)}" + (f" pp{_num(e.pp)}" if float(e.pp) > 1 else "")
            + (f" ep{_num(e.ep)}" if float(e.ep) > 1 else "")
            + (" dp-attention" if float(e.dp_attention) else "")
            + f" mem {float(e.memory_fraction):.2f} seqs {_num(e.max_seqs)}")
  return f"{pools} | {actor} | {engine} | {plan.mode.name}"
