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

import collections
import concurrent.futures
import threading
import time

import jax
import numpy as np

import costmodel as cm
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import rounding
from search._src import space as space_lib
from search._src import stage_tables
from search._src import valid_space
from search._src.result import SearchResult


# The valid space's product view (re-exported: the cut DP, benchmarks and tests
# read it from here).
pool_level = valid_space.pool_level
_Blocks = valid_space.Blocks


class _TopK:
  """Running top-k of scored rows (:func:`search._src.result.ranking`)."""

  def __init__(self, k: int):
    self.k = k
    self.ranked = None

  def add(self, values, scores: evaluate.Scores):
    take = result_lib.ranking(scores.step_time_s, scores.feasible, scores.excess, self.k)
    new = result_lib.Ranked(values[take], scores.step_time_s[take], scores.feasible[take],
                            scores.excess[take])
    merged = result_lib.rank(*((self.ranked,) if self.ranked is not None else ()), new)
    self.ranked = result_lib.Ranked(*(a[:self.k] for a in merged))


# Ranked plans kept beyond the top-k, for those the chosen framework's exporter refuses.
_SPARE = 16

ENUMERATION_CHUNK = 16384
"""Rows per call of enumeration's compiled scorer: a chunk of ``chunk_size``
rows is scored in calls of this many, side by side on every core."""

TABLES_FROM = 100_000_000
"""Enumerations of at least this many plans look the stages one block decides
up in tables (:mod:`search._src.stage_tables`). On PPO Qwen2.5-7B with a 1.5B
reward model, 64 H100, three pools, the tables take seconds to build and
nearly double enumeration's rate: they pay from about 1e8 plans."""


TABLES_BUDGET_S = 30.0
"""Random search and annealing build tables (:func:`_Run`) from this budget
up, or when told to, and use them whenever this process has built them. A
first build, compilation included, takes seconds per family of the large
jobs and then raises the rate 1.2-10x; in a short cold run the by-row scorer,
which compiles faster, finds plans as good (``benchmarks.search_large``)."""


# Valid spaces and their stage tables are kept per process, as compiled
# programs are: a baseline called again on the same problem (the benchmark's
# warm runs, a sweep of budgets) finds them built. DeepSeek-V3's split family
# on 16,384 H800 takes tens of seconds to find its valid block rows; its
# blocks hold 7.3 million rows.
_KEPT = 8
_kept_values: collections.OrderedDict = collections.OrderedDict()
_kept_lock = threading.Lock()


def _fingerprint(tree) -> tuple:
  """A hashable key of a pytree's structure and values (a job, a cluster)."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return (str(treedef), *((np.asarray(x).dtype.str, np.shape(x), np.asarray(x).tobytes())
                          for x in leaves))


def _kept(key, build):
  """``build()``, kept for ``key`` (the last :data:`_KEPT` keys)."""
  with _kept_lock:
    if key in _kept_values:
      _kept_values.move_to_end(key)
      return _kept_values[key]
  value = build()
  with _kept_lock:
    _kept_values[key] = value
    while len(_kept_values) > _KEPT:
      _kept_values.popitem(last=False)
  return value


def _valid_space(job, cluster, family, space, framework) -> tuple:
  """``(key, FamilySpace, Blocks)`` of ``family`` in ``framework``'s space,
  kept per process under ``key``."""
  key = ("space", framework, family, space, _fingerprint((job, cluster)))

  def build():
    fs = _family_space(job, cluster, family, space, framework)
    return fs, _Blocks(fs)

  return (key, *_kept(key, build))


class _Run:
  """One baseline run: the clock, the family's valid space in ``framework``'s
  space (the one :func:`search.optimize` searches), its exact evaluator
  (``chunk`` rows per compiled call) and the running top-k.

  ``scorer``: ``enumerate`` labels every row (:attr:`Blocks.label_of`) and
  looks stages up in tables from :data:`TABLES_FROM` plans; ``sampled`` does
  too where tables cover some stage, and otherwise costs every stage on every
  row (``factored=False``: uniform samples share few stage inputs). ``tables``:
  True builds them, None uses them only if this process built them before,
  False never; the valid space and its tables are kept per process
  (:func:`_kept`)."""

  def __init__(self, job, cluster, family, space, efficiency, chunk: int, top_k: int,
               framework: str = "any", scorer: str = "sampled", tables: bool | None = True):
    if scorer not in ("enumerate", "sampled"):
      raise ValueError(f"_Run: scorer={scorer!r} must be 'enumerate' or 'sampled'")
    self.t0 = time.perf_counter()
    self.job, self.cluster, self.framework = job, cluster, framework
    key, self.fs, self.blocks = _valid_space(job, cluster, family, space, framework)
    eff = efficiency if efficiency is not None else cm.Efficiency()
    key += ("tables", _fingerprint(eff))
    if self.blocks.size >= TABLES_FROM and tables is not False and (
        tables or key in _kept_values):
      tables = _kept(key, lambda: stage_tables.build(self.fs, self.blocks, eff))
    else:
      tables = {}
    #: Whether rows are scored with their labels (:meth:`scores`).
    self.labelled = scorer == "enumerate" or bool(tables)
    self.ev = evaluate.Evaluator(self.fs, eff, chunk=chunk, factored=self.labelled,
                                 label_of=self.blocks.label_of if self.labelled else None,
                                 tables=tables or None)
    self.top = _TopK(top_k + _SPARE)
    self.top_k = top_k

  def sample(self, rng: np.random.Generator, n: int):
    """``n`` uniform samples of the valid space, scored and kept; returns
    ``(rows, scores)``."""
    if self.labelled:
      rows, labels = self.blocks.sample(rng, n, labels=True)
      return rows, self.scores(rows, labels)
    rows = self.blocks.sample(rng, n)
    return rows, self.scores(rows)

  def scores(self, rows: np.ndarray, labels: np.ndarray | None = None) -> evaluate.Scores:
    """Exact scores of valid plans ``rows`` (labelled when :attr:`labelled`,
    found by :meth:`Blocks.labels_of` where not given), added to the top-k."""
    if self.labelled and labels is None:
      labels = self.blocks.labels_of(rows)
    s = self.ev.scores(rows, labels=labels if self.labelled else None)
    self.top.add(rows, s)
    return s

  def elapsed_s(self) -> float:
    return time.perf_counter() - self.t0

  def _runs(self, row: np.ndarray) -> bool:
    plan = self.fs.to_plan(np.asarray(row, np.float64))
    return fw_lib.export_error(self.framework, plan, self.job, self.cluster) is None

  def result(self, method: str, size: int = 0) -> SearchResult:
    """The run's :class:`SearchResult`: its top feasible plans that the framework
    runs, scored exactly, or why none was found (the least-bad plan's violations)."""
    fs, ev, r = self.fs, self.ev, self.top.ranked
    plans = []
    if r is not None and r.feasible.any():
      rows = [i for i in np.flatnonzero(r.feasible) if self._runs(r.values[i])][:self.top_k]
      plans = result_lib.exact_plans(ev, r.values[rows]) if rows else []
    best = plans[0] if plans else (None, None)
    reason = None
    if not plans:
      reason = f"no feasible plan found in family {fs.family!r}"
      if r is not None and r.feasible.any():
        reason += f" that {self.framework} runs"
      elif r is not None and len(r.values):
        est = ev.estimates(r.values[:1])[0]
        reason += "; the least-bad: " + result_lib.least_bad_reason(est)
    accepted = fw_lib.accepting(best[0], self.job, self.cluster) if plans else ()
    return SearchResult(method=method, family=fs.family, best_plan=best[0],
                        best_estimate=best[1], top=tuple(plans),
                        top_families=(fs.family,) * len(plans), evaluations=ev.count,
                        space_size=size, wall_time_s=self.elapsed_s(),
                        infeasible_reason=reason, framework=self.framework,
                        accepted_by=accepted,
                        best_by_family_s={fs.family: float(best[1].step_time_s) if plans
                                          else np.inf})


def _family_space(job, cluster, family, space, framework: str = "any"
                  ) -> space_lib.FamilySpace:
  """``family``'s space as :func:`search.optimize` builds it for ``framework``
  (:meth:`Framework.build`: its rules, node layout, ties and forced settings)."""
  fw = fw_lib.get(framework)
  _check_family(job, family, framework)
  fs = fw.build(family, job, cluster, space)
  if fs is None:
    raise ValueError(fw.why_empty(family, job, cluster, space))
  return fs


def _check_family(job: cm.RLJob, family: str, framework: str) -> None:
  if family not in space_lib.FAMILIES:
    raise ValueError(f"family={family!r} is not one of {space_lib.FAMILIES}")
  if not cm.placement(family).applies_to(job):
    raise ValueError(f"family={family!r} does not apply to algorithm {job.algorithm!r} "
                     f"(it places roles the job lacks; families of the job: "
                     f"{space_lib.default_families(job)})")
  runs = fw_lib.families_for(job, framework, max_staleness=1, partial_rollout=True)
  if cm.placement(family).applies_to(job) and family not in runs:
    raise ValueError(f"family={family!r} is not a placement {framework=} runs for this job "
                     f"(it runs {runs})")


def why_empty(job: cm.RLJob, cluster: cm.Cluster, family: str,
              space: space_lib.SpaceOptions | None = None, framework: str = "any") -> str | None:
  """Why ``family`` holds no valid plan of ``job`` on ``cluster`` in
  ``framework``'s space (None when it holds one): its construction
  (:meth:`Framework.why_empty`) or, failing that, no pool combination of its
  valid space (built once per process, as the baselines keep it).

  Raises:
    ValueError: for an unknown family or framework, or a family the framework
      does not run.
  """
  result_lib.check_arguments(f"family {family!r}", job, cluster)
  fw = fw_lib.get(framework)
  _check_family(job, family, framework)
  why = fw.why_empty(family, job, cluster, space)
  if why is None and not len(_valid_space(job, cluster, family, space, framework)[2].pools):
    why = f"{family}: no pool combination of {framework}'s space holds a valid layout"
  return why


def _empty(method: str, job, cluster, family, space, framework) -> SearchResult | None:
  """A baseline's result on a family that holds no plan (None when it holds one)."""
  why = why_empty(job, cluster, family, space, framework)
  if why is None:
    return None
  return SearchResult(method=method, family=family, infeasible_reason=why,
                      skipped={family: why}, framework=framework)


def space_size(job: cm.RLJob, cluster: cm.Cluster, family: str,
               space: space_lib.SpaceOptions | None = None, framework: str = "any") -> int:
  """Number of valid discrete plans of ``family`` in ``framework``'s space (what
  enumeration scores)."""
  if fw_lib.get(framework).why_empty(family, job, cluster, space) is not None:
    return 0
  return _valid_space(job, cluster, family, space, framework)[2].size


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
  run = _Run(job, cluster, family, space, efficiency, min(chunk_size, ENUMERATION_CHUNK), top_k,
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

  Where the valid space holds at least :data:`TABLES_FROM` plans the stages
  one block decides are looked up in tables (built once per process, as
  enumeration's) with ``tables`` True, or None (the default) and either a
  budget of at least :data:`TABLES_BUDGET_S` or tables this process built
  before (never with False); the other stages are costed per row. On the
  large jobs' families (``benchmarks.search_large``, 8,192-row batches) the
  tables raise the rate 2-5x on the five whose training stages they hold, and
  a little on Qwen3-235B's split family (generation only); DeepSeek-V3's split
  family has none (its blocks are too large)."""
  if (empty := _empty("random", job, cluster, family, space, framework)) is not None:
    return empty
  run = _Run(job, cluster, family, space, efficiency, batch, top_k, framework,
             tables=_tables(tables, budget_s))
  rng = np.random.default_rng(seed)
  left = max_evaluations if max_evaluations is not None else np.inf
  while left > 0:
    run.sample(rng, int(min(batch, left)))
    left -= min(batch, left)
    if run.elapsed_s() >= budget_s:
      break
  return run.result("random")


def _tables(tables: bool | None, budget_s: float) -> bool | None:
  """A sampled baseline's ``tables`` for :class:`_Run`: None (the default)
  builds them from a budget of :data:`TABLES_BUDGET_S`, else uses them only if kept."""
  if tables is not None and not isinstance(tables, bool):
    raise ValueError(f"tables={tables!r} must be True, False or None")
  return (True if budget_s >= TABLES_BUDGET_S else None) if tables is None else tables


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
  run = _Run(job, cluster, family, space, efficiency, chains, top_k, framework,
             tables=_tables(tables, budget_s))
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
