"""Baselines for the layout search: exhaustive enumeration, random search and
simulated annealing, all on the exact model over a family's discrete space.

Exhaustive enumeration walks the valid space block by block: for every
combination of pool sizes, each block of variables (one role's layout, the
engine) is enumerated and filtered on its own, and the product of the valid
blocks is decoded chunk by chunk (mixed radix), so memory stays bounded by
the chunk size whatever the size of the space. The next chunk is decoded in a
thread while the last one is scored (in compiled calls on every core); a running
top-k is kept.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

import costmodel as cm
from search._src import baseline_run
from search._src import kept_spaces
from search._src import result as result_lib
from search._src import rounding
from search._src import space as space_lib
from search._src.baseline_run import ENUMERATION_CHUNK
from search._src.baseline_run import Run
from search._src.result import SearchResult


def _empty(method: str, job, cluster, family, space, framework) -> SearchResult | None:
  """A baseline's result on a family that holds no plan (None when it holds one)."""
  why = kept_spaces.why_empty(job, cluster, family, space, framework)
  if why is None:
    return None
  return SearchResult(method=method, family=family, infeasible_reason=why,
                      skipped={family: why}, framework=framework)


def enumerate_plans(job: cm.RLJob, cluster: cm.Cluster, family: str,
                    space: space_lib.SpaceOptions | None = None, chunk_size: int = 65536,
                    top_k: int = 5, efficiency: cm.Efficiency | None = None,
                    max_plans: int | None = None, framework: str = "any") -> SearchResult:
  """Scores every valid discrete plan of ``family`` exactly; keeps the top-k.

  Args:
    job: The RL job.
    cluster: The cluster.
    family: The placement family.
    space: Discrete options (defaults if None; see ``SpaceOptions.compact``
      for a space small enough to enumerate).
    chunk_size: Plans decoded and scored at a time (memory is bounded by it),
      in compiled calls of at most :data:`ENUMERATION_CHUNK` rows.
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
  if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
    raise ValueError(f"enumerate_plans: chunk_size={chunk_size!r} must be a positive integer")
  if (empty := _empty("enumerate", job, cluster, family, space, framework)) is not None:
    return empty
  run = Run(job, cluster, family, space, efficiency, min(chunk_size, ENUMERATION_CHUNK), top_k,
             framework, scorer="enumerate")
  blocks, ev, top = run.blocks, run.ev, run.top
  size = blocks.size
  if max_plans is not None and size > max_plans:
    raise ValueError(f"enumerate_plans: family {family!r} has {size:,} valid plans, more "
                     f"than max_plans={max_plans:,}")
  # The next chunk is decoded in a thread of its own while this one is scored
  # (the scorer runs outside the interpreter lock, on every core).
  with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlcost-decode") as pool:
    chunks = blocks.chunks(chunk_size)
    ahead = pool.submit(next, chunks, None)
    while (part := ahead.result()) is not None:
      ahead = pool.submit(next, chunks, None)
      top.add(part[0], ev.scores(part[0], labels=part[1]))
  return run.result("enumerate", size)


def random_search(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                  seed: int = 0, space: space_lib.SpaceOptions | None = None,
                  batch: int = 4096, top_k: int = 5,
                  efficiency: cm.Efficiency | None = None,
                  max_evaluations: int | None = None, framework: str = "any",
                  tables: bool | None = None) -> SearchResult:
  """Uniform samples of the valid space scored exactly until ``budget_s``
  seconds have passed (at least one batch) or ``max_evaluations`` plans are
  scored, whichever comes first; ``framework`` as in :func:`enumerate_plans`.

  Where the valid space holds at least
  :data:`~search._src.baseline_run.TABLES_FROM` plans the stages one block
  decides are looked up in tables (built once per process, as enumeration's) with ``tables`` True, or None (the default) and either a
  budget of at least :data:`~search._src.baseline_run.TABLES_BUDGET_S` or tables this process built
  before (never with False); the other stages are costed per row. On the
  large jobs' families (``benchmarks.search_large``, 8,192-row batches) the
  tables raise the rate 2-5x on the five whose training stages they hold, and
  a little on Qwen3-235B's split family (generation only); DeepSeek-V3's split
  family has none (its blocks are too large)."""
  if (empty := _empty("random", job, cluster, family, space, framework)) is not None:
    return empty
  run = Run(job, cluster, family, space, efficiency, batch, top_k, framework,
             tables=baseline_run.tables_choice(tables, budget_s))
  rng = np.random.default_rng(seed)
  left = max_evaluations if max_evaluations is not None else np.inf
  while left > 0:
    run.sample(rng, int(min(batch, left)))
    left -= min(batch, left)
    if run.elapsed_s() >= budget_s:
      break
  return run.result("random")


def simulated_annealing(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                        seed: int = 0, space: space_lib.SpaceOptions | None = None,
                        chains: int = 1024, t_start: float = 0.1, t_end: float = 0.002,
                        top_k: int = 5, efficiency: cm.Efficiency | None = None,
                        max_evaluations: int | None = None, framework: str = "any",
                        tables: bool | None = None) -> SearchResult:
  """Batched simulated annealing on the exact model until ``budget_s`` (or
  ``max_evaluations`` scored plans), in ``framework``'s space (as in
  :func:`enumerate_plans`).

  ``chains`` independent chains start from uniform samples; each iteration
  proposes one random valid neighbour per chain
  (:func:`~search._src.rounding.random_neighbours`: one
  variable moved by one option, or GPUs moved between pools) and accepts it with probability
  ``min(1, exp(-(log t_new - log t_old) / T))``; ``T`` falls geometrically
  from ``t_start`` to ``t_end`` over the time budget. The chains' proposals
  share few stage inputs, so they are scored as :func:`random_search`'s
  (looked up in the tables by their labels, :meth:`Blocks.labels_of`;
  ``tables`` as there).
  """
  if (empty := _empty("annealing", job, cluster, family, space, framework)) is not None:
    return empty
  run = Run(job, cluster, family, space, efficiency, chains, top_k, framework,
             tables=baseline_run.tables_choice(tables, budget_s))
  fs, ev = run.fs, run.ev
  rng = np.random.default_rng(seed)
  cur, s = run.sample(rng, chains)
  cur_o = np.log(result_lib.objective(s.step_time_s, s.feasible, s.excess))
  limit = max_evaluations if max_evaluations is not None else np.inf
  while run.elapsed_s() < budget_s and ev.count + chains <= limit:
    frac = min(run.elapsed_s() / max(budget_s, 1e-9), 1.0)
    if max_evaluations is not None:
      frac = max(frac, min(ev.count / max(limit, 1), 1.0))
    temp = t_start * (t_end / t_start) ** frac
    prop, labels, has = rounding.random_neighbours(fs, run.blocks, cur, rng)
    if not has.any():
      break
    s = run.scores(prop, labels)
    new_o = np.log(result_lib.objective(s.step_time_s, s.feasible, s.excess))
    accept = has & (rng.uniform(size=chains) < np.exp(np.minimum(-(new_o - cur_o) / temp, 0.0)))
    cur[accept] = prop[accept]
    cur_o[accept] = new_o[accept]
  return run.result("annealing")
