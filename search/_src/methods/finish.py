"""One result from any method: every family's plans ranked together.

A method's ``result`` gives each family's scored plans
(:class:`~search._src.methods.base.Outcome`); :func:`finish` ranks them
together (:func:`~search._src.result.ranking`), keeps the best ``top_k``
feasible plans that differ in placement or a parallel degree
(:func:`~search._src.result.layout_key`) and that the framework's exporter
accepts, estimates them exactly (each checked by
:func:`costmodel.validate_plan`) and, when off-policy families were searched,
finds the best on-policy plan too. When no plan fits it says why.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import sharding
from search._src.methods import base
from search._src.result import SearchResult

# Ranked plans looked at for distinct, exportable top plans (each family keeps
# as many, :data:`~search._src.result.KEEP`).
MAX_SCAN = result_lib.KEEP


def finish(outcome: base.Outcome, problem: base.Problem, method: base.Method, top_k: int,
           evaluations: int) -> SearchResult:
  """The :class:`SearchResult` of ``outcome`` (see the module docstring).

  Args:
    outcome: What the method's ``result`` returned.
    problem: What was searched.
    method: The method.
    top_k: Plans to return.
    evaluations: Exact evaluations the run spent (used when the outcome does
      not say).
  """
  fw = fw_lib.get(problem.framework)
  name = method.name
  skipped = {**problem.skipped, **outcome.skipped}
  runs = [f for f in outcome.families if len(f.ranked.feasible)]
  best_by = {}
  for f in outcome.families:
    r = f.ranked
    best_by[f.label or f.fs.family] = (float(r.step_time_s[0]) if len(r.feasible)
                                       and r.feasible[0] else np.inf)
  families = problem.families
  done = dict(method=name, best_by_family_s=best_by, framework=fw.name, skipped=skipped,
              evaluations=(outcome.evaluations if outcome.evaluations is not None
                           else evaluations),
              family=families[0] if len(families) == 1 else None, **outcome.fields)
  if not runs:
    if not method.plans and outcome.fields.get("bounds"):
      return SearchResult(**done)  # a floor per family, no plan by design
    why = "; ".join(skipped.values()) or f"{name} scored no plan"
    prefix = "no family holds a plan: " if method.plans else "no family bounded: "
    return SearchResult(infeasible_reason=prefix + why, **done)
  # Rank every family's plans together.
  owner = [(k, i) for k, run in enumerate(runs) for i in range(len(run.ranked.feasible))]
  cat = lambda field: np.concatenate([getattr(r.ranked, field) for r in runs], 0)
  order = result_lib.ranking(cat("step_time_s"), cat("feasible"), cat("excess"))
  entries = [owner[j] for j in order]
  feasible = [(k, i) for k, i in entries if runs[k].ranked.feasible[i]]
  if not feasible:
    k, i = entries[0]
    run = runs[k]
    est = run.ev.estimates(run.ranked.values[i:i + 1])[0]
    reason = (f"no feasible plan in families {', '.join(r.fs.family for r in runs)}; the "
              f"least-bad ({run.fs.family}): " + result_lib.least_bad_reason(est))
    return SearchResult(infeasible_reason=reason, **done)
  job, cluster = problem.job, problem.cluster
  chosen, refusal = distinct(runs, feasible, top_k, fw, job, cluster)
  if not chosen:
    return SearchResult(infeasible_reason=f"no plan found that {fw.name} runs; its exporter "
                        f"refused the best: {refusal}", **done)
  on_policy = None
  if any(not fw_lib.on_policy(r.fs.family) for r in runs):
    sync = [(k, i) for k, i in feasible if fw_lib.on_policy(runs[k].fs.family)]
    first, _ = distinct(runs, sync, 1, fw, job, cluster)
    if first:
      ((plan, est),), fam = exact(runs, first), runs[first[0][0]].fs.family
      on_policy = SearchResult(method=name, best_plan=plan, best_estimate=est,
                               family=fam, top=((plan, est),), top_families=(fam,),
                               framework=fw.name, relaxed=done.get("relaxed", False),
                               accepted_by=fw_lib.accepting(plan, job, cluster))
  # The plans are already as the framework runs them (``Structure.runs_as``), so the
  # ranking's exact estimates are theirs and its order stands.
  plans, top_fams = tuple(exact(runs, chosen)), tuple(runs[k].fs.family for k, _ in chosen)
  done["family"] = top_fams[0]
  return SearchResult(best_plan=plans[0][0], best_estimate=plans[0][1], top=plans,
                      top_families=top_fams, on_policy=on_policy,
                      accepted_by=fw_lib.accepting(plans[0][0], job, cluster), **done)


def distinct(runs, entries, top_k, fw, job, cluster):
  """The first ``top_k`` entries ``(family, row)`` with distinct layouts
  (:func:`~search._src.result.layout_key`) that ``fw`` runs, and the first
  refusal met (None when none)."""
  chosen, seen, refusal = [], set(), None
  # A row whose layout columns equal those of a row whose key is taken has that
  # key: skipped without building its plan (the ranked plans near the top mostly
  # differ in tuning knobs).
  columns = [result_lib.layout_columns(r.fs.names) for r in runs]
  taken = set()
  for k, i in entries[:MAX_SCAN]:
    fs = runs[k].fs
    row = np.asarray(runs[k].ranked.values[i], np.float64)
    raw = (k, row[columns[k]].tobytes())
    if raw in taken:
      continue
    plan = fs.to_plan(row)
    key = result_lib.layout_key(plan, fs.family)
    if key in seen:
      taken.add(raw)
      continue
    err = fw_lib.export_error(fw.name, plan, job, cluster)
    if err is not None:
      refusal = refusal or err
      continue
    seen.add(key)
    taken.add(raw)
    chosen.append((k, i))
    if len(chosen) == top_k:
      break
  return chosen, refusal


def exact(runs, chosen):
  """(plan, exact estimate) of each chosen entry, in order. Each family's
  entries are estimated in a thread of their own, so that the families' own
  whole-estimate programs (``SharedSpace.whole`` off) compile side by side."""
  fams = sorted({k for k, _ in chosen})
  rows = {k: [i for kk, i in chosen if kk == k] for k in fams}

  def one(k):
    return zip(rows[k], result_lib.exact_plans(runs[k].ev, runs[k].ranked.values[rows[k]]),
               strict=True)

  with concurrent.futures.ThreadPoolExecutor(max(1, min(len(fams), sharding.cores()))) as pool:
    out = {(k, i): pe for k, pairs in zip(fams, pool.map(one, fams), strict=True)
           for i, pe in pairs}
  return [out[c] for c in chosen]
