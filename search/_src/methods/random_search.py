"""Random search as a method: uniform samples of each family's valid space,
scored exactly, one batch a step (the families in turn), until the run's
budget ends it."""

from __future__ import annotations

from typing import NamedTuple

from search._src.methods import base
from search._src.methods import family_runs


class State(NamedTuple):
  """Random search's state.

  Attributes:
    problem: What is searched.
    batch: Samples per step.
    tables: The tables choice (:func:`~search._src.methods.family_runs.tables`).
    seed: The seed.
    runs: Per family: its run once built, or why it holds no plan (None:
      not built yet).
    rngs: Per family, its random generator.
    batches: Per family, the batches scored.
    step: Steps done (the next family is ``step % families``).
  """

  problem: base.Problem
  batch: int
  tables: bool | None
  seed: int
  runs: tuple
  rngs: tuple
  batches: tuple
  step: int = 0


def init(problem: base.Problem, seed: int, batch: int, tables: bool | None) -> State:
  n = len(problem.families)
  return State(problem=problem, batch=batch, tables=family_runs.tables(tables, problem),
               seed=seed, runs=(None,) * n,
               rngs=tuple(family_runs.rng(seed, f) for f in problem.families),
               batches=(0,) * n)


def _left(state: State) -> float:
  limit = state.problem.max_evaluations
  return float("inf") if limit is None else limit - family_runs.evaluations(state.runs)


def step(state: State, scorer: base.Scorer) -> State:
  """Scores one batch of the next family that holds plans (building its run first)."""
  k = state.step % len(state.runs)
  runs, batches = list(state.runs), list(state.batches)
  if runs[k] is None:
    runs[k] = family_runs.build(state.problem, state.problem.families[k], scorer, state.batch,
                                tables=state.tables)
  if not isinstance(runs[k], str):
    runs[k].sample(state.rngs[k], int(min(state.batch, _left(state._replace(runs=runs)))))
    batches[k] += 1
  return state._replace(runs=tuple(runs), batches=tuple(batches), step=state.step + 1)


def done(state: State) -> bool:
  """When every family holds no plan, or the run's evaluations are spent."""
  return all(isinstance(r, str) for r in state.runs) or _left(state) <= 0


def stoppable(state: State) -> bool:
  """Once every family has scored a batch (or holds no plan)."""
  return all(isinstance(r, str) or b > 0 for r, b in zip(state.runs, state.batches,
                                                           strict=True))


def result(state: State) -> base.Outcome:
  skipped = {f: r for f, r in zip(state.problem.families, state.runs, strict=True)
             if isinstance(r, str)}
  return family_runs.outcome(state.runs, skipped)


def random_search(batch: int = 4096, tables: bool | None = None) -> base.Method:
  """Random search as a :class:`~search._src.methods.base.Method`.

  Args:
    batch: Uniform samples scored per step.
    tables: Look the stages one block decides up in tables (from
      :data:`search._src.baseline_run.TABLES_FROM` plans): True builds them, None
      builds them from a budget of :data:`search._src.baseline_run.TABLES_BUDGET_S`
      (else uses them if this process built them), False never.

  Raises:
    ValueError: for a ``batch`` that is not a positive integer, or ``tables``
      not True, False or None.
  """
  batch = base.check_int("random", "batch", batch, 1)
  if tables is not None and not isinstance(tables, bool):
    raise ValueError(f"random: tables={tables!r} must be True, False or None")
  return base.Method(
      name="random", init=lambda problem, seed: init(problem, seed, batch, tables), step=step,
      done=done, result=result, stoppable=stoppable, anytime=True,
      description="uniform samples of the valid space, scored exactly")
