"""What the methods over a family's valid space share: building a family's
run (its valid space, exact evaluator and running top-k,
:class:`search._src.baseline_run.Run`), visiting the families in turn, and their
:class:`~search._src.methods.base.Outcome`."""

from __future__ import annotations

import numpy as np

from search._src import baseline_run
from search._src import kept_spaces
from search._src import space as space_lib
from search._src.methods import base

# Ranked rows each family's run keeps per plan asked for: the final ranking
# looks for ``top_k`` distinct layouts among them, and the rows near the top
# mostly differ in tuning knobs only.
ROWS_PER_PLAN = 8


def build(problem: base.Problem, family: str, scorer: base.Scorer, chunk: int,
          kind: str = "sampled", tables: bool | None = None):
  """The run of ``family`` (:class:`search._src.baseline_run.Run`), its evaluator
  counted by ``scorer``; or, when no pool combination of its valid space holds
  a plan, why (a string)."""
  why = kept_spaces.why_empty(problem.job, problem.cluster, family, problem.options,
                            problem.framework)
  if why is not None:
    return why
  run = baseline_run.Run(problem.job, problem.cluster, family, problem.options,
                      problem.efficiency, chunk, ROWS_PER_PLAN * problem.top_k,
                      problem.framework, scorer=kind, tables=tables)
  scorer.adopt(run.ev)
  return run


def tables(choice: bool | None, problem: base.Problem) -> bool | None:
  """A sampled method's ``tables`` for :func:`build` (:func:`search._src.baseline_run.tables_choice`
  of the run's budget; no budget in seconds counts as an unlimited one)."""
  budget = problem.budget_s if problem.budget_s is not None else np.inf
  return baseline_run.tables_choice(choice, budget)


def rng(seed: int, family: str) -> np.random.Generator:
  """The family's own random generator (its draws do not depend on the
  other families searched)."""
  return np.random.default_rng([seed, space_lib.FAMILIES.index(family)])


def outcome(runs, skipped: dict, **fields) -> base.Outcome:
  """The outcome of families' runs (None entries: not built yet)."""
  families = tuple(base.FamilyPlans(r.fs, r.ev, r.top.ranked) for r in runs
                   if not isinstance(r, (str, type(None))) and r.top.ranked is not None)
  return base.Outcome(families=families, skipped=dict(skipped), fields=fields)


def evaluations(runs) -> int:
  """Exact evaluations of the built runs."""
  return sum(r.ev.count for r in runs if not isinstance(r, (str, type(None))))
