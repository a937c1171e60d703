"""One ranking and one result type for every search method.

The gradient search (:func:`search.optimize`), the baselines (enumeration,
random search, annealing) and the rules of thumb all order plans with
:func:`ranking` (feasible plans first, by step time; then infeasible ones, by
memory excess) and report a :class:`SearchResult`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

import costmodel as cm

# Objective of an infeasible plan with no memory excess: above every feasible
# step time.
_INFEASIBLE = 1e12


def objective(step_time_s, feasible, excess) -> np.ndarray:
  """One number to minimise: the step time of a feasible plan; above every
  feasible plan, ``1e12 * (1 + excess)`` for an infeasible one (its memory
  excess; a non-finite step time counts as 1e12)."""
  t = np.where(np.isfinite(step_time_s), step_time_s, _INFEASIBLE)
  return np.where(feasible, t, _INFEASIBLE * (1.0 + np.nan_to_num(excess, nan=1e6)))


def ranking(step_time_s, feasible, excess, k: int | None = None) -> np.ndarray:
  """Indices of plans, best first: feasible plans by step time, then
  infeasible ones by memory excess; ties keep their order (stable). With
  ``k``, the first ``k`` only, sorting just the rows that can be among them
  (a running top-k of 65,536-row chunks: a full sort took 2.5 ms a chunk)."""
  obj = objective(step_time_s, feasible, excess)
  if k is None or len(obj) <= 4 * k:
    return np.argsort(obj, kind="stable")[:k]
  cand = np.flatnonzero(obj <= np.partition(obj, k - 1)[k - 1])
  return cand[np.argsort(obj[cand], kind="stable")][:k]


class Ranked(NamedTuple):
  """Scored discrete plans of one family, best first (numpy)."""

  values: np.ndarray
  step_time_s: np.ndarray
  feasible: np.ndarray
  excess: np.ndarray

  @property
  def objective(self) -> np.ndarray:
    return objective(self.step_time_s, self.feasible, self.excess)


# Ranked plans a family's search keeps (:func:`rank`'s ``keep``): the final
# ranking looks at no more than these of all families together, so the best
# this many of each family hold every plan it can reach.
KEEP = 20_000


def rank(*parts: Ranked, keep: int | None = None) -> Ranked:
  """The rows of ``parts`` together, ordered by :func:`ranking`, each distinct
  value vector once (its best-ranked copy); with ``keep``, the best ``keep``
  of them only (copies are looked for among the best rows alone)."""
  if keep is not None and keep < 1:
    raise ValueError(f"rank: keep={keep} must be >= 1")
  v, t, f, x = (np.concatenate(a, 0) for a in zip(*parts, strict=True))
  order = ranking(t, f, x)
  m = len(order) if keep is None else min(len(order), 2 * keep)
  while True:
    head = order[:m]
    first = first_copies(v[head])
    if keep is None or len(first) >= keep or m == len(order):
      break
    m = min(len(order), 4 * m)
  sel = head[first[:keep]]
  return Ranked(v[sel], t[sel], f[sel], x[sel])


def first_copies(values: np.ndarray) -> np.ndarray:
  """Indices of the first copy of each distinct row of ``values`` [N, V], in
  order. Rows are told apart by their bytes (with -0.0 made 0.0) in a dict:
  8x faster than ``np.unique(axis=0)`` on 300,000 rows, which sorts them as
  records field by field."""
  n = len(values)
  if values.ndim != 2 or not values.shape[1]:
    return np.arange(min(n, 1))
  rows = np.ascontiguousarray(values) + 0  # a copy, -0.0 as 0.0
  keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel().tolist()
  # Filled from the last row back, each key keeps its first row's index.
  first = dict(zip(reversed(keys), range(n - 1, -1, -1)))
  return np.sort(np.fromiter(first.values(), np.int64, len(first)))


def distinct_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``np.unique(values, axis=0, return_inverse=True)`` of a 2-D array: its
  distinct rows in lexicographic order and each row's index among them (1-D).
  Each row gets one integer key, its rank among the rows, refined column by
  column with 1-D sorts: 3-5x faster than ``np.unique(axis=0)`` (which sorts
  records field by field) on the 82,000-row pool grids of block sweeps."""
  values = np.asarray(values)
  if values.ndim != 2:
    raise ValueError(f"distinct_rows: values has shape {values.shape}, needs 2 dimensions")
  n, k = values.shape
  key = np.zeros(n, np.int64)
  for j in range(k):
    codes, col = np.unique(values[:, j], return_inverse=True)
    _, key = np.unique(key * len(codes) + col.reshape(-1), return_inverse=True)
    key = key.reshape(-1)
  m = int(key.max()) + 1 if n and k else min(n, 1)
  out = np.empty((m, k), values.dtype)
  out[key if k else np.zeros(n, np.int64)] = values
  return out, (key if k else np.zeros(n, np.int64))


def exact_plans(ev, values: np.ndarray) -> list[tuple[cm.Plan, cm.Estimate]]:
  """Plans of the rows ``values`` of one family with their exact estimates,
  each checked by :func:`costmodel.validate_plan`.

  Args:
    ev: The family's :class:`~search._src.evaluate.Evaluator`.
    values: [n, V] value vectors.
  """
  fs = ev.fs
  out = []
  for row, est in zip(values, ev.estimates(values), strict=True):
    plan = fs.to_plan(np.asarray(row, np.float64))
    cm.validate_plan(fs.job, plan, fs.cluster)
    out.append((plan, est))
  return out


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a search method found.

  Attributes:
    method: What found it: a registered method's name (:data:`search.METHODS`:
      ``optimize``, the gradient search, ``cut_dp``, ``enumerate``, ``random``,
      ``annealing``, ``bound``), or a rule of thumb's name
      (``verl``, ``openrlhf``, ``areal``, ``kv_fit``).
    best_plan: The best feasible plan (None when nothing fits).
    best_estimate: Its exact estimate (None when nothing fits).
    family: The placement family of ``best_plan``; when nothing fits, the
      family searched if there was one (baselines, rules), else None.
    top: Up to ``top_k`` feasible (plan, estimate), best first
      (:func:`ranking`).
    top_families: The family of each entry of ``top``.
    evaluations: Exact plan evaluations.
    wall_time_s: Wall time, compilation included.
    infeasible_reason: When nothing fits: why (which stage of the least-bad
      plan does not fit and by how much); else None.
    description: One line on the method (a rule of thumb: what it does).
    space_size: Valid plans in the space (enumeration), else 0.
    relaxed_bound_s: Per family, the best relaxed step time among starts that
      end (nearly) feasible (``optimize`` only): the continuous optimum the
      rounding starts from (NaN when no start ended feasible). It is a
      reference, not a strict lower bound: the smooth maxima at the final
      temperature overestimate the exact ones by up to ``2 ** tau_end`` (1.4%
      at 0.02) each, and the starts are local optima.
    best_by_family_s: Per family, the best exact step time found (inf when
      none fits).
    history: Per family, the best relaxed step time of the nearly feasible
      starts at each optimisation step (``optimize`` only; numpy, inf before
      any is feasible).
    compile_time_s: Seconds of ``wall_time_s`` spent tracing and compiling
      (a warm search, or one served by the persistent cache, spends little).
    framework: The framework whose space was searched (``any``: none).
    accepted_by: The exporters (:data:`export.FRAMEWORKS`) that accept
      ``best_plan``.
    on_policy: When off-policy modes were allowed (``max_staleness > 0``):
      the best on-policy (synchronous) plan found, as a result of its own;
      else None.
    relaxed: Whether the relaxed (gradient) phase ran (``optimize``'s
      ``relaxed``); without it ``relaxed_bound_s`` is NaN and ``history``
      empty.
    skipped: Per family asked for that holds no valid plan of the job on the
      cluster, why (:func:`search._src.space.why_empty`, e.g. ``colocated: no
      training layout of 24 GPUs divides the 4,096-sample batch``); the other
      families were searched.
    stopped: When the run's budget (``budget_s``, ``max_evaluations``) ended
      it before the method finished, which one (:func:`search.run`); else None.
    bounds: Per family, a step time no valid plan of the family beats (the
      ``bound`` method: a :class:`~search._src.bound.FamilyBound`, ``bound_s``
      inf when the family holds no plan).
  """

  method: str
  best_plan: cm.Plan | None = None
  best_estimate: cm.Estimate | None = None
  family: str | None = None
  top: tuple = ()
  top_families: tuple = ()
  evaluations: int = 0
  wall_time_s: float = 0.0
  infeasible_reason: str | None = None
  description: str = ""
  space_size: int = 0
  relaxed_bound_s: dict = dataclasses.field(default_factory=dict)
  best_by_family_s: dict = dataclasses.field(default_factory=dict)
  history: dict = dataclasses.field(default_factory=dict)
  compile_time_s: float = 0.0
  framework: str = "any"
  accepted_by: tuple = ()
  on_policy: SearchResult | None = None
  relaxed: bool = False
  skipped: dict = dataclasses.field(default_factory=dict)
  stopped: str | None = None
  bounds: dict = dataclasses.field(default_factory=dict)

  @property
  def search_time_s(self) -> float:
    """Wall time less compilation."""
    return max(self.wall_time_s - self.compile_time_s, 0.0)

  @property
  def feasible(self) -> bool:
    """Whether a plan fits."""
    return self.best_plan is not None

  @property
  def best_step_time_s(self) -> float:
    """Step time of ``best_plan`` (inf when nothing fits)."""
    return float(self.best_estimate.step_time_s) if self.feasible else float("inf")


def check_arguments(function: str, job, cluster) -> None:
  """A search method's ``(job, cluster)``: TypeError naming the one of the wrong type."""
  for name, value, cls in (("job", job, cm.RLJob), ("cluster", cluster, cm.Cluster)):
    if not isinstance(value, cls):
      raise TypeError(f"{function}: {name} must be {cls.__name__}, got {type(value).__name__}")


def least_bad_reason(est: cm.Estimate) -> str:
  """Why the least-bad plan does not fit: its estimate's violations."""
  return "; ".join(est.violations or ("no stage fits",))


def _degrees(p: cm.Parallel | None) -> tuple:
  if p is None:
    return ()
  return tuple(float(getattr(p, d)) for d in ("tp", "pp", "cp", "ep"))


def layout_columns(names: tuple[str, ...]) -> np.ndarray:
  """Columns of a value vector that :func:`layout_key` depends on: the pool
  sizes and every degree (``*.tp``, ``*.pp``, ``*.cp``, ``*.ep``); rows equal in
  them have equal layout keys."""
  return np.asarray([j for j, n in enumerate(names)
                     if n.startswith("pool.") or n.endswith((".tp", ".pp", ".cp", ".ep"))],
                    dtype=np.int64)


def layout_key(plan: cm.Plan, family: str) -> tuple:
  """What tells two plans apart beyond tuning knobs: the family, the pool
  sizes and every parallel degree (roles' tp, pp, cp, ep; the engine's tp, pp,
  ep). Micro-batches, ZeRO stage, recompute, offload, the engine's
  concurrency and memory fraction are knobs."""
  pools = tuple((p.name, float(p.gpus)) for p in plan.pools)
  roles = tuple((r.role, _degrees(r.train), _degrees(r.infer)) for r in plan.roles)
  e = plan.engine
  return (family, pools, roles, (float(e.tp), float(e.pp), float(e.ep)))


def differences(plan: cm.Plan, family: str, best: cm.Plan, best_family: str) -> str:
  """What in ``plan`` differs from ``best`` (family, pools, degrees, then
  knobs), e.g. ``pool gen 8->6, actor tp 2->1``; ``same layout`` if nothing
  differs but tuning knobs no one names."""
  out = []
  if family != best_family:
    out.append(f"family {best_family}->{family}")
  bp = {p.name: float(p.gpus) for p in best.pools}
  for p in plan.pools:
    if bp.get(p.name) != float(p.gpus):
      out.append(f"pool {p.name} {bp.get(p.name, 0):g}->{float(p.gpus):g}")
  br = {r.role: r for r in best.roles}
  for r in plan.roles:
    b = br.get(r.role)
    for phase in ("train", "infer"):
      mine, theirs = getattr(r, phase), getattr(b, phase) if b is not None else None
      if mine is None or theirs is None:
        continue
      if phase == "infer" and r.role in ("actor", "critic"):
        names = ("micro_batch",)  # degrees shared with training
      else:
        names = ("tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage",
                 "recompute", "offload")
      tag = f"{r.role}" if phase == "train" or r.role not in ("actor", "critic") else \
          f"{r.role} infer"
      for n in names:
        a, c = float(getattr(theirs, n)), float(getattr(mine, n))
        if a != c:
          out.append(f"{tag} {n.replace('micro_batch', 'mb')} {a:g}->{c:g}")
  for n in ("tp", "pp", "ep", "dp_attention", "max_seqs", "memory_fraction"):
    a, c = float(getattr(best.engine, n)), float(getattr(plan.engine, n))
    if a != c:
      out.append(f"engine {n} {a:g}->{c:g}")
  return ", ".join(out) or "same layout"
