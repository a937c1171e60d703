"""A baseline planner: a dynamic program over cuts of the stage graph.

In the style of RLinf's open auto-placement planner (its idea, not its code:
github.com/RLinf/RLinf, ``toolkits/auto_placement/placement.py`` at commit
6c6b2c04030b9eefb09707d40e916d4f22ace8b2, where a collocated merge of two
sub-schedules adds their costs and a disaggregated one pipelines them, the
slower side's per-batch cost setting the pace), run on this project's cost
model. The stage graph of an RL step is cut recursively; at each cut the two
sides are either *colocated* (one GPU set, time-shared: their times add) or
*split* onto disjoint GPU sets (their times overlap where the stage graph lets
them: the larger one counts), with every split of the GPUs tried; the leaves
choose each stage group's layout.

Only cuts that map onto a placement the project expresses
(:func:`costmodel.placements` of the job, filtered by the framework and the
modes the user allows, :func:`search._src.frameworks.families_for`) are
admitted; the cut tree of each family and its leaves are those of
:mod:`search._src.cut_tree`.

Every pool combination the family's space allows is a split the DP tries; the
leaves are evaluated once per pool size and shared by all the splits that use
that size (the DP's memo). Sizes are visited coarse to fine (multiples of
large powers of two first), so a time budget cuts the finest splits, not whole
families. The DP's best few combinations per family, each with the product of
its leaves' best layouts, are scored by the exact evaluator (like for like with
random search and annealing). The weight sync and the colocated switch belong
to no leaf: only the exact scoring sees them.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

import costmodel as cm
from search._src import cut_tree
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import kept_spaces
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import valid_space
from search._src.result import SearchResult


def _check(budget_s, keep, combos, top_k) -> None:
  if budget_s is not None and (not isinstance(budget_s, (int, float)) or isinstance(
      budget_s, bool) or not budget_s > 0 or math.isnan(budget_s)):
    raise ValueError(f"cut_dp: budget_s={budget_s!r} must be None or a number > 0")
  for name, v in (("keep", keep), ("combos", combos), ("top_k", top_k)):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
      raise ValueError(f"cut_dp: {name}={v!r} must be an integer >= 1")


def cut_dp(job: cm.RLJob, cluster: cm.Cluster, budget_s: float | None = None,
           families=None, space: space_lib.SpaceOptions | None = None,
           framework: str = "any", max_staleness: int = 0, partial_rollout: bool = False,
           keep: int = 2, combos: int = 8, top_k: int = 5,
           efficiency: cm.Efficiency | None = None,
           chunk: int = evaluate.DEFAULT_CHUNK) -> SearchResult:
  """Plans ``job`` on ``cluster`` with the dynamic program over stage cuts.

  Deterministic: the same arguments give the same plan.

  Args:
    job: The RL job.
    cluster: The cluster.
    budget_s: Wall-time budget, set-up included (None: every split). Leaf
      evaluations stop once it is spent (after the coarsest level of pool
      sizes, which always runs); the exact scoring of the final candidates
      follows.
    families: Families (cut trees) to plan over; default: every one that
      ``framework`` runs in the allowed modes.
    space: The discrete options of each variable (defaults if None).
    framework: ``any`` or a framework (see :func:`search.optimize`).
    max_staleness: Largest staleness allowed (0: on-policy).
    partial_rollout: Whether partial rollouts may be used.
    keep: Best layouts each leaf keeps per pool size (the final candidates
      are the products of these).
    combos: Best pool combinations per family scored exactly.
    top_k: Plans returned.
    efficiency: Efficiency parameters (defaults if None).
    chunk: Rows per compiled evaluation call.

  Returns:
    A :class:`SearchResult` (``method="cut_dp"``) over the families, its
    plans scored by the exact evaluator.

  Raises:
    ValueError: for a bad ``budget_s``, ``keep``, ``combos`` or ``top_k``,
      an unknown family or one outside the framework and modes.
  """
  t0 = time.perf_counter()
  result_lib.check_arguments("cut_dp", job, cluster)
  _check(budget_s, keep, combos, top_k)
  allowed = fw_lib.families_for(job, framework, max_staleness, partial_rollout)
  fams = tuple(families) if families is not None else allowed
  if not fams:
    raise ValueError(f"cut_dp: families={fams!r} is empty")
  for f in fams:
    if f not in allowed:
      raise ValueError(f"cut_dp: family={f!r} is not a placement of {framework=} with "
                       f"{max_staleness=}, {partial_rollout=} (allowed: {allowed})")
  fw = fw_lib.get(framework)
  eff = efficiency if efficiency is not None else cm.Efficiency()
  runs, skipped = [], {}
  for f in fams:
    why = kept_spaces.why_empty(job, cluster, f, space, framework)
    if why is not None:  # a family that holds no plan is skipped, saying why
      skipped[f] = why
      continue
    # The valid space as the baselines keep it per process (built once).
    _, fs, blocks = kept_spaces.valid_space(job, cluster, f, space, framework)
    runs.append(cut_tree.CutFamily(fs, eff, chunk, keep, blocks=blocks))
  if not runs:
    return SearchResult(method="cut_dp", wall_time_s=time.perf_counter() - t0,
                        framework=fw.name, skipped=skipped,
                        infeasible_reason="no family holds a plan: " + "; ".join(
                            skipped.values()))
  work = sorted(((lvl, r, k, key) for r, run in enumerate(runs)
                 for lvl, k, key in run.items()), key=lambda t: (-t[0], t[1], t[2], t[3]))
  # Every family gets at least one complete pool combination whatever the budget.
  coarsest = min(run.first_level() for run in runs)
  cut_tree.score_leaves(runs, work, chunk, budget_s, t0, coarsest)
  return dataclasses.replace(_final(runs, combos, keep, top_k, t0, fw.name), skipped=skipped)


def family_seeds(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, keep: int = 2,
                 combos: int = 8) -> np.ndarray:
  """The DP's final candidates in one family, for a search to start from.

  The coarsest level of pool sizes only (multiples of the largest powers of
  two, every leaf's layouts scored there), with ``ev`` (an evaluator with
  whole estimates, ``full=True``) shared with the caller: the products of each
  leaf's ``keep`` best layouts on the DP's ``combos`` best pool combinations,
  valid rows only ([N, V]; empty when the family holds no combination).
  """
  if not ev.full:
    raise ValueError("cut_dp.family_seeds: the evaluator needs full=True (stage times)")
  grid = fs.pool_grid()
  # The coarsest level that holds a complete plan: only its pool combinations
  # are built (a 16,384-GPU split has 229,000 of them in all).
  for level in sorted(set(valid_space.pool_level(grid).tolist()), reverse=True):
    blocks = valid_space.Blocks(fs, min_level=level)
    if len(blocks.pools):
      break
  else:
    return np.zeros((0, len(fs.vars)))
  run = cut_tree.CutFamily(fs, ev.eff, ev.chunk, keep, ev=ev, blocks=blocks)
  level = run.first_level()
  cut_tree.score_leaves([run], [(lvl, 0, k, key) for lvl, k, key in run.items() if lvl >= level],
                ev.chunk)
  cand = [run.candidates(p, keep) for p in run.combine(combos)]
  if not cand:
    return np.zeros((0, len(fs.vars)))
  values = np.concatenate(cand, 0)
  return values[fs.valid(values)]


def _final(runs: list[cut_tree.CutFamily], combos: int, keep: int, top_k: int, t0: float,
           framework: str = "any") -> SearchResult:
  """Scores each family's best DP combinations exactly and ranks them together; keeps
  those ``framework``'s exporter accepts."""
  scored, best_by = [], {}
  for run in runs:
    cand = [run.candidates(p, keep) for p in run.combine(combos)]
    if not cand:
      best_by[run.fs.family] = np.inf
      continue
    values = np.concatenate(cand, 0)
    values = values[run.fs.valid(values)]
    s = run.ev.scores(values)
    ranked = result_lib.rank(result_lib.Ranked(values, s.step_time_s, s.feasible, s.excess))
    scored.append((run, ranked))
    best_by[run.fs.family] = (float(ranked.step_time_s[0]) if len(ranked.feasible)
                              and ranked.feasible[0] else np.inf)
  entries = [(float(r.step_time_s[i]), j, i) for j, (_, r) in enumerate(scored)
             for i in range(len(r.feasible)) if r.feasible[i]]
  entries.sort()
  evaluations = sum(run.ev.count for run in runs)
  size = sum(run.blocks.size for run in runs)
  if not entries:
    return SearchResult(method="cut_dp", evaluations=evaluations, space_size=size,
                        wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                        infeasible_reason="the cut DP found no feasible plan in families "
                        f"{', '.join(run.fs.family for run in runs)}")
  plans, fams = [], []
  for _, j, i in entries:
    run, r = scored[j]
    job, cluster = run.fs.job, run.fs.cluster
    if fw_lib.export_error(framework, run.fs.to_plan(r.values[i]), job, cluster) is not None:
      continue
    plans += result_lib.exact_plans(run.ev, r.values[i:i + 1])
    fams.append(run.fs.family)
    if len(plans) == top_k:
      break
  if not plans:
    return SearchResult(method="cut_dp", evaluations=evaluations, space_size=size,
                        wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                        framework=framework, infeasible_reason="the cut DP found no feasible "
                        f"plan that {framework} runs")
  return SearchResult(method="cut_dp", family=fams[0], best_plan=plans[0][0],
                      best_estimate=plans[0][1], top=tuple(plans), top_families=tuple(fams),
                      evaluations=evaluations, space_size=size,
                      wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                      framework=framework,
                      accepted_by=fw_lib.accepting(plans[0][0], runs[0].fs.job,
                                                   runs[0].fs.cluster))
