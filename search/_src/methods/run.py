"""One entry point for every search method: :func:`run`."""

from __future__ import annotations

import dataclasses
import time

import costmodel as cm
from search._src import compile_cache
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import space as space_lib
from search._src.methods import base
from search._src.methods import finish as finish_lib
from search._src.methods import registry
from search._src.result import SearchResult


def run(method: str | base.Method, job: cm.RLJob, cluster: cm.Cluster, *,
        families=None, framework: str = "any", budget_s: float | None = None,
        max_evaluations: int | None = None, seed: int = 0, top_k: int = 5,
        space: space_lib.SpaceOptions | None = None,
        efficiency: cm.Efficiency | None = None, max_staleness: int = 0,
        partial_rollout: bool = False, progress: bool = False,
        compilation_cache: str | bool | None = None) -> SearchResult:
  """Runs a search method on ``job`` and ``cluster``; one result type for all.

  The method is initialised on the families that hold a plan (the others are
  in ``skipped`` with why), then stepped until it is done, or until
  ``budget_s`` seconds have passed or ``max_evaluations`` exact evaluations
  are spent at a step after which it may stop (``Method.stoppable``); the
  families' plans are then ranked together
  (:func:`~search._src.methods.finish.finish`).

  Args:
    method: A registered method's name (:data:`search.METHODS`) or a
      :class:`~search._src.methods.base.Method` (e.g. ``search.method(
      "random", batch=2048)``).
    job: The RL job.
    cluster: The cluster.
    families: Placement families to search (a name or several; default: every
      family that applies to the job, that ``framework`` runs and whose mode
      the user allows).
    framework: ``any`` or a framework (``verl``, ``openrlhf``, ``nemo_rl``,
      ``slime``, ``areal``): its space is searched and the plans returned are
      those its exporter accepts.
    budget_s: Wall-time budget in seconds, compilation included (None: until
      the method is done).
    max_evaluations: Exact evaluations the run may spend (None: no limit).
    seed: Random seed; the same seed gives the same result (with a budget in
      evaluations, not in seconds, for methods that stop on their budget).
    top_k: Plans to return.
    space: The discrete options of each variable (defaults if None).
    efficiency: Efficiency parameters of the cost model (defaults if None).
    max_staleness: Largest staleness allowed (0: on-policy, synchronous).
    partial_rollout: Whether partial rollouts may be used.
    progress: Show progress (the gradient search: a bar on a terminal, a line
      per family).
    compilation_cache: Directory of the persistent JAX compilation cache;
      None: ``$RLCOST_JAX_CACHE`` or ``~/.cache/rlcost/jax``; False: off.

  Returns:
    A :class:`~search._src.result.SearchResult`: the best ``top_k`` plans with
    exact estimates, or why none fits; ``stopped`` says when the budget ended
    the run before the method finished.

  Raises:
    ValueError: for an unknown method, family or framework, a family outside
      the framework or allowed modes, a negative budget, a non-positive
      ``top_k`` or ``max_evaluations``, a negative ``seed`` or
      ``max_staleness``, ``partial_rollout`` without staleness, or a method
      that never finishes by itself run without a budget.
    TypeError: for a job or cluster of the wrong type.
  """
  t0 = time.perf_counter()
  m = registry.get(method)
  result_lib.check_arguments("run", job, cluster)
  base.check_seconds("run", "budget_s", budget_s)
  if max_evaluations is not None:
    base.check_int("run", "max_evaluations", max_evaluations, 1)
  base.check_int("run", "seed", seed, 0)
  base.check_int("run", "top_k", top_k, 1)
  base.check_int("run", "max_staleness", max_staleness, 0)
  if partial_rollout and max_staleness < 1:
    raise ValueError(f"run: partial_rollout=True needs max_staleness >= 1, got "
                     f"{max_staleness=}")
  fw = fw_lib.get(framework)
  fams = check_families(job, framework, families, max_staleness, partial_rollout)
  if m.anytime and budget_s is None and max_evaluations is None:
    raise ValueError(f"run: method={m.name!r} runs until it is stopped; give budget_s or "
                     "max_evaluations (both are None)")
  skipped = {f: fw.why_empty(f, job, cluster, space) for f in fams}
  skipped = {f: why for f, why in skipped.items() if why is not None}
  problem = base.Problem(
      job=job, cluster=cluster, families=tuple(f for f in fams if f not in skipped),
      framework=fw.name, options=space,
      efficiency=efficiency if efficiency is not None else cm.Efficiency(),
      max_staleness=int(max_staleness), partial_rollout=bool(partial_rollout),
      budget_s=None if budget_s is None else float(budget_s), max_evaluations=max_evaluations,
      progress=bool(progress), top_k=int(top_k), skipped=skipped, t0=t0)
  if not problem.families:
    return SearchResult(method=m.name, framework=fw.name, skipped=skipped,
                        family=fams[0] if len(fams) == 1 else None,
                        wall_time_s=time.perf_counter() - t0,
                        infeasible_reason="no family holds a plan: " + "; ".join(
                            skipped.values()))
  compile_cache.enable(compilation_cache)
  scorer = base.Scorer(problem.efficiency)
  stopped = None
  with compile_cache.CompileClock() as clock:
    state = m.init(problem, int(seed))
    while not m.done(state):
      if m.stoppable(state):
        if budget_s is not None and time.perf_counter() - t0 >= budget_s:
          stopped = f"budget_s={budget_s:g} spent"
          break
        if max_evaluations is not None and scorer.evaluations >= max_evaluations:
          stopped = f"max_evaluations={max_evaluations} spent"
          break
      state = m.step(state, scorer)
    outcome = m.result(state)
    res = finish_lib.finish(outcome, problem, m, top_k, scorer.evaluations)
  if stopped is not None and res.infeasible_reason and not outcome.families:
    res = dataclasses.replace(res, infeasible_reason=f"{stopped} before {m.name} had a "
                              "result; " + res.infeasible_reason)
  wall = time.perf_counter() - t0
  res = dataclasses.replace(res, wall_time_s=wall, compile_time_s=min(clock.seconds, wall),
                            stopped=stopped, description=res.description or m.description)
  if res.on_policy is not None:
    res = dataclasses.replace(res, on_policy=dataclasses.replace(
        res.on_policy, wall_time_s=wall, compile_time_s=res.compile_time_s))
  return res


def check_families(job: cm.RLJob, framework: str, families, max_staleness: int = 0,
                   partial_rollout: bool = False) -> tuple[str, ...]:
  """The families to search: ``families`` (a name or several) checked, or by
  default every one that ``framework`` runs in the allowed modes.

  Raises:
    ValueError: for an unknown family, one outside the framework's space and
      modes (that applies to the job), or no family.
  """
  allowed = fw_lib.families_for(job, framework, max_staleness, partial_rollout)
  if families is None:
    fams = allowed
  elif isinstance(families, str):
    fams = (families,)
  else:
    fams = tuple(families)
  for f in fams:
    if f not in space_lib.FAMILIES:
      raise ValueError(f"families: family={f!r} is not one of {space_lib.FAMILIES}")
    if f not in allowed and cm.placement(f).applies_to(job):
      raise ValueError(f"families: family={f!r} is outside the space of {framework=} with "
                       f"{max_staleness=}, {partial_rollout=} (allowed: {allowed})")
  if not fams:
    raise ValueError(f"families: families={families!r} is empty")
  return fams
