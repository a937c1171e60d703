"""Simulated annealing as a method: batched chains on the exact model over each
family's valid space, one iteration of one family's chains a step (the
families in turn).

``chains`` independent chains start from uniform samples; each iteration
proposes one random valid neighbour per chain
(:func:`~search._src.rounding.random_neighbours`: one variable moved by one
option, or GPUs moved between pools) and accepts it with probability
``min(1, exp(-(log t_new - log t_old) / T))``; ``T`` falls geometrically from
``t_start`` to ``t_end`` over the run's budget (the larger of the fractions of
``budget_s`` and ``max_evaluations`` spent). The chains' proposals share few
stage inputs, so they are scored as random search's (looked up in the tables
by their labels where the family has them).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from search._src import result as result_lib
from search._src import rounding
from search._src.methods import base
from search._src.methods import family_runs


class Options(NamedTuple):
  """Annealing's settings (:func:`annealing`)."""

  chains: int = 1024
  t_start: float = 0.1
  t_end: float = 0.002
  tables: bool | None = None


class Chains(NamedTuple):
  """One family's chains: their plans and log objectives, and whether no
  chain has a valid neighbour left."""

  cur: np.ndarray
  cur_o: np.ndarray
  stuck: bool = False


class State(NamedTuple):
  """Annealing's state.

  Attributes:
    problem: What is searched.
    options: The settings.
    tables: The tables choice (:func:`~search._src.methods.family_runs.tables`).
    runs: Per family: its run once built, or why it holds no plan (None: not
      built yet).
    rngs: Per family, its random generator.
    chains: Per family, its chains (None before its starts are drawn).
    step: Steps done.
  """

  problem: base.Problem
  options: Options
  tables: bool | None
  runs: tuple
  rngs: tuple
  chains: tuple
  step: int = 0


def init(problem: base.Problem, seed: int, options: Options) -> State:
  n = len(problem.families)
  return State(problem=problem, options=options,
               tables=family_runs.tables(options.tables, problem), runs=(None,) * n,
               rngs=tuple(family_runs.rng(seed, f) for f in problem.families),
               chains=(None,) * n)


def _log_objective(s) -> np.ndarray:
  return np.log(result_lib.objective(s.step_time_s, s.feasible, s.excess))


def _fraction(state: State) -> float:
  """The part of the run's budget spent, 0 to 1."""
  p = state.problem
  frac = 0.0
  if p.budget_s is not None:
    frac = min((time.perf_counter() - p.t0) / max(p.budget_s, 1e-9), 1.0)
  if p.max_evaluations is not None:
    frac = max(frac, min(family_runs.evaluations(state.runs) / p.max_evaluations, 1.0))
  return frac


def _active(state: State) -> list[int]:
  return [k for k, (r, c) in enumerate(zip(state.runs, state.chains, strict=True))
          if not isinstance(r, str) and not (c is not None and c.stuck)]


def step(state: State, scorer: base.Scorer) -> State:
  """Draws the next family's starts (building its run first), or runs one
  iteration of its chains."""
  active = _active(state)
  k = active[state.step % len(active)]
  runs, chains = list(state.runs), list(state.chains)
  o, rng = state.options, state.rngs[k]
  if runs[k] is None:
    runs[k] = family_runs.build(state.problem, state.problem.families[k], scorer, o.chains,
                                tables=state.tables)
  run = runs[k]
  if isinstance(run, str):
    pass
  elif chains[k] is None:
    cur, s = run.sample(rng, o.chains)
    chains[k] = Chains(cur, _log_objective(s))
  else:
    temp = o.t_start * (o.t_end / o.t_start) ** _fraction(state)
    cur, cur_o = chains[k].cur.copy(), chains[k].cur_o.copy()
    prop, labels, has = rounding.random_neighbours(run.fs, run.blocks, cur, rng)
    if not has.any():
      chains[k] = chains[k]._replace(stuck=True)
    else:
      s = run.scores(prop, labels)
      new_o = _log_objective(s)
      accept = has & (rng.uniform(size=len(cur))
                      < np.exp(np.minimum(-(new_o - cur_o) / temp, 0.0)))
      cur[accept] = prop[accept]
      cur_o[accept] = new_o[accept]
      chains[k] = Chains(cur, cur_o)
  return state._replace(runs=tuple(runs), chains=tuple(chains), step=state.step + 1)


def done(state: State) -> bool:
  """When no family has chains left to move, or another iteration would pass
  the run's evaluations."""
  limit = state.problem.max_evaluations
  return not _active(state) or (limit is not None and family_runs.evaluations(state.runs)
                                + state.options.chains > limit)


def stoppable(state: State) -> bool:
  """Once every family that holds plans has drawn its starts."""
  return all(isinstance(r, str) or c is not None
             for r, c in zip(state.runs, state.chains, strict=True))


def result(state: State) -> base.Outcome:
  skipped = {f: r for f, r in zip(state.problem.families, state.runs, strict=True)
             if isinstance(r, str)}
  return family_runs.outcome(state.runs, skipped)


def annealing(chains: int = 1024, t_start: float = 0.1, t_end: float = 0.002,
              tables: bool | None = None) -> base.Method:
  """Simulated annealing (see the module docstring) as a
  :class:`~search._src.methods.base.Method`.

  Args:
    chains: Independent chains (rows per step).
    t_start: Temperature at the start (of the log step time).
    t_end: Temperature at the end of the budget.
    tables: As random search's (:func:`search._src.methods.random_search.random_search`).

  Raises:
    ValueError: for ``chains`` not a positive integer, temperatures not
      positive with ``t_end <= t_start``, or ``tables`` not True, False or None.
  """
  chains = base.check_int("annealing", "chains", chains, 1)
  if not 0 < t_end <= t_start:
    raise ValueError(f"annealing: {t_start=} and {t_end=} must satisfy 0 < t_end <= t_start")
  if tables is not None and not isinstance(tables, bool):
    raise ValueError(f"annealing: tables={tables!r} must be True, False or None")
  options = Options(chains, float(t_start), float(t_end), tables)
  return base.Method(
      name="annealing", init=lambda problem, seed: init(problem, seed, options), step=step,
      done=done, result=result, stoppable=stoppable, anytime=True,
      description="batched simulated annealing on the exact model")
