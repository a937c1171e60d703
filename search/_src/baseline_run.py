"""One run of a baseline over a family's valid space: the clock, the exact
evaluator (by row, by label or with stage tables), the running top-k and the
result it ends with.
"""

from __future__ import annotations

import time

import numpy as np

import costmodel as cm
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import kept_spaces
from search._src import result as result_lib
from search._src import stage_tables
from search._src.result import SearchResult


class TopK:
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
SPARE = 16

ENUMERATION_CHUNK = 16384
"""Rows per call of enumeration's compiled scorer: a chunk of ``chunk_size``
rows is scored in calls of this many, side by side on every core."""

TABLES_FROM = 100_000_000
"""Enumerations of at least this many plans look the stages one block decides
up in tables (:mod:`search._src.stage_tables`). On PPO Qwen2.5-7B with a 1.5B
reward model, 64 H100, three pools, the tables take seconds to build and
nearly double enumeration's rate: they pay from about 1e8 plans."""


TABLES_BUDGET_S = 30.0
"""Random search and annealing build tables (:class:`Run`) from this budget
up, or when told to, and use them whenever this process has built them. A
first build, compilation included, takes seconds per family of the large
jobs and then raises the rate 1.2-10x; in a short cold run the by-row scorer,
which compiles faster, finds plans as good (``benchmarks.search_large``)."""


class Run:
  """One baseline run: the clock, the family's valid space in ``framework``'s
  space (the one :func:`search.optimize` searches), its exact evaluator
  (``chunk`` rows per compiled call) and the running top-k.

  ``scorer``: ``enumerate`` labels every row (:attr:`Blocks.label_of`) and
  looks stages up in tables from :data:`TABLES_FROM` plans; ``sampled`` does
  too where tables cover some stage, and otherwise costs every stage on every
  row (``factored=False``: uniform samples share few stage inputs). ``tables``:
  True builds them, None uses them only if this process built them before,
  False never; the valid space and its tables are kept per process
  (:func:`~search._src.kept_spaces.kept`)."""

  def __init__(self, job, cluster, family, space, efficiency, chunk: int, top_k: int,
               framework: str = "any", scorer: str = "sampled", tables: bool | None = True):
    if scorer not in ("enumerate", "sampled"):
      raise ValueError(f"Run: scorer={scorer!r} must be 'enumerate' or 'sampled'")
    self.t0 = time.perf_counter()
    self.job, self.cluster, self.framework = job, cluster, framework
    key, self.fs, self.blocks = kept_spaces.valid_space(job, cluster, family, space, framework)
    eff = efficiency if efficiency is not None else cm.Efficiency()
    key += ("tables", kept_spaces.fingerprint(eff))
    if self.blocks.size >= TABLES_FROM and tables is not False and (
        tables or kept_spaces.holds(key)):
      tables = kept_spaces.kept(key, lambda: stage_tables.build(self.fs, self.blocks, eff))
    else:
      tables = {}
    #: Whether rows are scored with their labels (:meth:`scores`).
    self.labelled = scorer == "enumerate" or bool(tables)
    self.ev = evaluate.Evaluator(self.fs, eff, chunk=chunk, factored=self.labelled,
                                 label_of=self.blocks.label_of if self.labelled else None,
                                 tables=tables or None)
    self.top = TopK(top_k + SPARE)
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


def tables_choice(tables: bool | None, budget_s: float) -> bool | None:
  """A sampled baseline's ``tables`` for :class:`Run`: None (the default)
  builds them from a budget of :data:`TABLES_BUDGET_S`, else uses them only if kept."""
  if tables is not None and not isinstance(tables, bool):
    raise ValueError(f"tables={tables!r} must be True, False or None")
  return (True if budget_s >= TABLES_BUDGET_S else None) if tables is None else tables
