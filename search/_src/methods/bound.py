"""The lower bound as a method: a step time no valid plan of each family beats
(:mod:`search._src.bound`), one batch of leaf layouts a step.

The first step builds each family's cut tree; each later step scores one
batch of leaf layouts (every leaf row of every pool combination, the cut DP's
work without a budget); then one step per family combines the least leaf
times and checks the premise (:func:`search._src.bound.family_bound`). It
returns no plan: its result's ``bounds`` hold each family's
:class:`~search._src.bound.FamilyBound`. A family whose bound does not hold
(its mode fuses inference, or a leaf's times depend on another leaf's layout),
or whose leaves were not all scored when the run's budget ended it, is in
``skipped`` with why.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from search._src import bound as bound_lib
from search._src import cut_tree
from search._src import evaluate
from search._src.methods import base
from search._src.methods import cut_dp as cut_dp_method


class State(NamedTuple):
  """The bound's state.

  Attributes:
    problem: What is searched.
    chunk: Leaf rows per step.
    runs: Each family's cut tree (after the first step).
    skipped: Per family without a bound, why.
    work: ``(level, run, leaf, key)`` of every leaf evaluation.
    pos: Leaf evaluations done.
    bounds: Per family, its bound once combined and checked.
    built: Whether the cut trees are built.
  """

  problem: base.Problem
  chunk: int
  runs: tuple = ()
  skipped: dict = {}
  work: tuple = ()
  pos: int = 0
  bounds: dict = {}
  built: bool = False


def init(problem: base.Problem, seed: int, chunk: int) -> State:
  del seed  # deterministic
  return State(problem=problem, chunk=chunk)


def step(state: State, scorer: base.Scorer) -> State:
  """Builds the cut trees, scores the next batch of leaf layouts, or bounds
  the next family."""
  if not state.built:
    runs, skipped, _ = cut_dp_method.build(state.problem, scorer, 1, state.chunk)
    # A family that holds no plan: nothing beats inf, and the bound says why.
    bounds = {f: bound_lib.FamilyBound(f, np.inf, {}, (), 0, 0.0, empty=why)
              for f, why in skipped.items()}
    kept = []
    for run in runs:
      try:
        bound_lib.check_mode(run.fs)
        kept.append(run)
      except ValueError as e:
        skipped[run.fs.family] = str(e)
    return state._replace(runs=tuple(kept), skipped=skipped,
                          work=tuple(cut_dp_method.work_of(kept)), bounds=bounds, built=True)
  if state.pos < len(state.work):
    return state._replace(pos=cut_tree.score_batch(list(state.runs), state.work, state.pos,
                                                  state.chunk))
  run = next(r for r in state.runs if r.fs.family not in {**state.bounds, **state.skipped})
  bounds, skipped = dict(state.bounds), dict(state.skipped)
  try:
    bounds[run.fs.family] = bound_lib.family_bound(run)._replace(
        wall_time_s=time.perf_counter() - state.problem.t0)
  except ValueError as e:
    skipped[run.fs.family] = str(e)
  return state._replace(bounds=bounds, skipped=skipped)


def done(state: State) -> bool:
  return state.built and all(r.fs.family in state.bounds or r.fs.family in state.skipped
                             for r in state.runs)


def stoppable(state: State) -> bool:
  """Once the cut trees are built (a family not bounded then says why)."""
  return state.built


def result(state: State) -> base.Outcome:
  skipped = dict(state.skipped)
  for run in state.runs:
    f = run.fs.family
    if f not in state.bounds and f not in skipped:
      skipped[f] = (f"{f}: the run's budget ended before every leaf layout was scored, so "
                    "there is no bound")
  return base.Outcome(skipped=skipped, fields=dict(bounds=dict(state.bounds)))


def bound(chunk: int = evaluate.DEFAULT_CHUNK) -> base.Method:
  """The lower bound (see the module docstring) as a
  :class:`~search._src.methods.base.Method`. Deterministic.

  Args:
    chunk: Leaf rows per step (and per compiled evaluation call).

  Raises:
    ValueError: for ``chunk`` not a positive integer.
  """
  chunk = base.check_int("bound", "chunk", chunk, 1)
  return base.Method(
      name="bound", init=lambda problem, seed: init(problem, seed, chunk), step=step,
      done=done, result=result, stoppable=stoppable, plans=False,
      description="a step time no valid plan of the family beats")
