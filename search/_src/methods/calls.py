"""The search functions by their earlier names and arguments, each a call of
:func:`search.run` with its method (one implementation of each method)."""

from __future__ import annotations

import math
import time

import numpy as np

import costmodel as cm
from search._src import bound as bound_lib
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import kept_spaces
from search._src import space as space_lib
from search._src.methods import annealing as annealing_lib
from search._src.methods import bound as bound_method
from search._src.methods import cut_dp as cut_dp_method
from search._src.methods import enumeration as enumeration_lib
from search._src.methods import random_search as random_lib
from search._src.methods import run as run_lib
from search._src import result as result_lib
from search._src.result import SearchResult


def _one_family(method: str, job, cluster, family, space, framework) -> SearchResult | None:
  """A one-family method's result when ``family`` holds no plan (None when it
  holds one).

  Raises:
    ValueError: for an unknown family, one that does not apply to the job or
      one the framework does not run.
  """
  why = kept_spaces.why_empty(job, cluster, family, space, framework)
  if why is None:
    return None
  return SearchResult(method=method, family=family, infeasible_reason=why,
                      skipped={family: why}, framework=framework)


def random_search(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                  seed: int = 0, space: space_lib.SpaceOptions | None = None,
                  batch: int = 4096, top_k: int = 5,
                  efficiency: cm.Efficiency | None = None,
                  max_evaluations: int | None = None, framework: str = "any",
                  tables: bool | None = None) -> SearchResult:
  """Uniform samples of ``family``'s valid space scored exactly until
  ``budget_s`` seconds have passed (at least one batch) or ``max_evaluations``
  plans are scored, whichever comes first: ``search.run("random", ...)``
  (:func:`search._src.methods.random_search.random_search`), in ``framework``'s
  space.

  Where the valid space holds at least :data:`search._src.baseline_run.TABLES_FROM`
  plans the stages one block decides are looked up in tables (built once per
  process, as enumeration's) with ``tables`` True, or None (the default) and
  either a budget of at least :data:`search._src.baseline_run.TABLES_BUDGET_S` or
  tables this process built before (never with False); the other stages are
  costed per row. On the large jobs' families (``benchmarks.search_large``,
  8,192-row batches) the tables raise the rate 2-5x on the five whose training
  stages they hold, and a little on Qwen3-235B's split family (generation
  only); DeepSeek-V3's split family has none (its blocks are too large).

  Raises:
    ValueError: for a bad family, framework, budget, batch or ``tables``.
  """
  method = random_lib.random_search(batch=batch, tables=tables)
  if (empty := _one_family("random", job, cluster, family, space, framework)) is not None:
    return empty
  return run_lib.run(method, job, cluster, families=(family,), framework=framework,
                     budget_s=budget_s, max_evaluations=max_evaluations, seed=seed,
                     top_k=top_k, space=space, efficiency=efficiency, max_staleness=1,
                     partial_rollout=True)


def simulated_annealing(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                        seed: int = 0, space: space_lib.SpaceOptions | None = None,
                        chains: int = 1024, t_start: float = 0.1, t_end: float = 0.002,
                        top_k: int = 5, efficiency: cm.Efficiency | None = None,
                        max_evaluations: int | None = None, framework: str = "any",
                        tables: bool | None = None) -> SearchResult:
  """Batched simulated annealing on the exact model in ``family`` until
  ``budget_s`` (or ``max_evaluations`` scored plans), in ``framework``'s space:
  ``search.run("annealing", ...)`` (:mod:`search._src.methods.annealing`).

  Raises:
    ValueError: for a bad family, framework, budget, ``chains``,
      temperatures or ``tables``.
  """
  method = annealing_lib.annealing(chains=chains, t_start=t_start, t_end=t_end, tables=tables)
  if (empty := _one_family("annealing", job, cluster, family, space, framework)) is not None:
    return empty
  return run_lib.run(method, job, cluster, families=(family,), framework=framework,
                     budget_s=budget_s, max_evaluations=max_evaluations, seed=seed,
                     top_k=top_k, space=space, efficiency=efficiency, max_staleness=1,
                     partial_rollout=True)


def enumerate_plans(job: cm.RLJob, cluster: cm.Cluster, family: str,
                    space: space_lib.SpaceOptions | None = None, chunk_size: int = 65536,
                    top_k: int = 5, efficiency: cm.Efficiency | None = None,
                    max_plans: int | None = None, framework: str = "any") -> SearchResult:
  """Scores every valid discrete plan of ``family`` exactly; keeps the top-k:
  ``search.run("enumerate", ...)`` (:mod:`search._src.methods.enumeration`).

  Args:
    job: The RL job.
    cluster: The cluster.
    family: The placement family.
    space: Discrete options (defaults if None; see ``SpaceOptions.compact``
      for a space small enough to enumerate).
    chunk_size: Plans decoded and scored at a time (memory is bounded by it).
    top_k: Plans to keep.
    efficiency: Efficiency parameters.
    max_plans: Refuse spaces with more valid plans than this.
    framework: ``any`` or a framework: the space :func:`search.optimize` searches
      for it (its rules, node layout, ties and forced settings); the plans kept
      are those its exporter accepts.

  Raises:
    ValueError: for a chunk size that is not a positive integer, when the
      space holds more than ``max_plans`` plans, the family
      cannot hold the job or is not one ``framework`` runs, or for an unknown
      framework.
  """
  method = enumeration_lib.enumeration(chunk_size=chunk_size, max_plans=max_plans)
  if (empty := _one_family("enumerate", job, cluster, family, space, framework)) is not None:
    return empty
  return run_lib.run(method, job, cluster, families=(family,), framework=framework,
                     top_k=top_k, space=space, efficiency=efficiency, max_staleness=1,
                     partial_rollout=True)


def cut_dp(job: cm.RLJob, cluster: cm.Cluster, budget_s: float | None = None,
           families=None, space: space_lib.SpaceOptions | None = None,
           framework: str = "any", max_staleness: int = 0, partial_rollout: bool = False,
           keep: int = 2, combos: int = 8, top_k: int = 5,
           efficiency: cm.Efficiency | None = None,
           chunk: int = evaluate.DEFAULT_CHUNK) -> SearchResult:
  """Plans ``job`` on ``cluster`` with the dynamic program over stage cuts:
  ``search.run("cut_dp", ...)`` (:mod:`search._src.methods.cut_dp`,
  :mod:`search._src.cut_dp`). Deterministic: the same arguments give the same
  plan.

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
  result_lib.check_arguments("cut_dp", job, cluster)
  if budget_s is not None and (not isinstance(budget_s, (int, float)) or isinstance(
      budget_s, bool) or not budget_s > 0 or math.isnan(budget_s)):
    raise ValueError(f"cut_dp: budget_s={budget_s!r} must be None or a number > 0")
  method = cut_dp_method.cut_dp(keep=keep, combos=combos, chunk=chunk)
  allowed = fw_lib.families_for(job, framework, max_staleness, partial_rollout)
  fams = tuple(families) if families is not None else allowed
  if not fams:
    raise ValueError(f"cut_dp: families={fams!r} is empty")
  for f in fams:
    if f not in allowed:
      raise ValueError(f"cut_dp: family={f!r} is not a placement of {framework=} with "
                       f"{max_staleness=}, {partial_rollout=} (allowed: {allowed})")
  return run_lib.run(method, job, cluster, families=fams, framework=framework,
                     budget_s=budget_s, top_k=top_k, space=space, efficiency=efficiency,
                     max_staleness=max_staleness, partial_rollout=partial_rollout)


def lower_bound(job: cm.RLJob, cluster: cm.Cluster, family: str,
                space: space_lib.SpaceOptions | None = None, framework: str = "any",
                efficiency: cm.Efficiency | None = None,
                chunk: int = evaluate.DEFAULT_CHUNK) -> bound_lib.FamilyBound:
  """A step time no valid plan of ``family`` beats: ``search.run("bound", ...)``
  (:mod:`search._src.methods.bound`, :mod:`search._src.bound`).

  With :func:`search.enumerate_plans` on an enumerable family and this bound
  on the others, a plan can be shown optimal over a whole job's space.

  Args:
    job: The RL job.
    cluster: The cluster.
    family: The placement family.
    space: Discrete options (defaults if None).
    framework: ``any`` or a framework: the space :func:`search.optimize`
      searches for it.
    efficiency: Efficiency parameters (defaults if None).
    chunk: Rows per compiled evaluation call.

  Returns:
    The family's :class:`~search._src.bound.FamilyBound` (``bound_s`` inf and
    ``empty`` saying why when the family holds no plan).

  Raises:
    ValueError: for an unknown family or one the framework does not run, one
      whose mode fuses inference, or one
      whose leaves' stage times (or a lone leaf's memory) depend on other
      leaves' layouts.
  """
  t0 = time.perf_counter()
  method = bound_method.bound(chunk=chunk)
  why = kept_spaces.why_empty(job, cluster, family, space, framework)
  if why is not None:  # no valid plan: nothing beats inf, and the bound says why
    return bound_lib.FamilyBound(family, np.inf, {}, (), 0, time.perf_counter() - t0,
                                 empty=why)
  res = run_lib.run(method, job, cluster, families=(family,), framework=framework, space=space,
                    efficiency=efficiency, max_staleness=1, partial_rollout=True)
  if family not in res.bounds:
    raise ValueError(res.skipped[family])
  return res.bounds[family]._replace(wall_time_s=time.perf_counter() - t0)
