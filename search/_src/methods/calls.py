"""The search functions by their earlier names and arguments, each a call of
:func:`search.run` with its method (one implementation of each method)."""

from __future__ import annotations

import costmodel as cm
from search._src import kept_spaces
from search._src import space as space_lib
from search._src.methods import annealing as annealing_lib
from search._src.methods import enumeration as enumeration_lib
from search._src.methods import random_search as random_lib
from search._src.methods import run as run_lib
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
