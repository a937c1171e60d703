"""The cut DP as a method: the dynamic program over cuts of the stage graph
(:mod:`search._src.cut_dp`), one batch of leaf layouts a step.

The first step builds each family's cut tree (:class:`~search._src.cut_tree.CutFamily`);
each later step scores one batch of leaf layouts, the families' pool sizes
coarse to fine (multiples of large powers of two first). A run may stop once
the coarsest level of every family is scored: every family then holds a
complete pool combination. ``result`` scores exactly the products of each
leaf's ``keep`` best layouts on the DP's ``combos`` best pool combinations,
and those of the coarsest level (so the DP ends no worse than where it stood
when it could first stop).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from search._src import cut_tree
from search._src import evaluate
from search._src import kept_spaces
from search._src import result as result_lib
from search._src.methods import base


class Options(NamedTuple):
  """The cut DP's settings (:func:`cut_dp`)."""

  keep: int = 2
  combos: int = 8
  chunk: int = evaluate.DEFAULT_CHUNK


class State(NamedTuple):
  """The cut DP's state.

  Attributes:
    problem: What is searched.
    options: The settings.
    runs: Each family's cut tree (after the first step).
    skipped: Per family that holds no plan, why.
    work: ``(level, run, leaf, key)`` of every leaf evaluation, coarse first.
    pos: Leaf evaluations done.
    coarsest: The finest level at which every family holds a complete pool
      combination (a run may stop once it is scored).
    starts: Each family's candidates when the coarsest level was scored.
    built: Whether the cut trees are built.
  """

  problem: base.Problem
  options: Options
  runs: tuple = ()
  skipped: dict = {}
  work: tuple = ()
  pos: int = 0
  coarsest: int = 0
  starts: tuple | None = None
  built: bool = False


def init(problem: base.Problem, seed: int, options: Options) -> State:
  del seed  # deterministic
  return State(problem=problem, options=options)


def build(problem: base.Problem, scorer: base.Scorer, keep: int, chunk: int):
  """Each family's cut tree (its evaluator counted by ``scorer``) and, per
  family whose valid space holds no pool combination, why."""
  runs, skipped = [], {}
  for f in problem.families:
    why = kept_spaces.why_empty(problem.job, problem.cluster, f, problem.options,
                                problem.framework)
    if why is not None:
      skipped[f] = why
      continue
    # The valid space as the baselines keep it per process (built once).
    _, fs, blocks = kept_spaces.valid_space(problem.job, problem.cluster, f, problem.options,
                                            problem.framework)
    ev = scorer.evaluator(fs, chunk=chunk, full=True)
    runs.append(cut_tree.CutFamily(fs, problem.efficiency, chunk, keep, ev=ev, blocks=blocks))
  return runs, skipped, work_of(runs)


def work_of(runs) -> list[tuple]:
  """``(level, run, leaf, key)`` of every leaf evaluation of ``runs``, coarse first."""
  return sorted(((lvl, r, k, key) for r, run in enumerate(runs) for lvl, k, key in run.items()),
                key=lambda t: (-t[0], t[1], t[2], t[3]))


def step(state: State, scorer: base.Scorer) -> State:
  """Builds the cut trees, or scores the next batch of leaf layouts."""
  o = state.options
  if not state.built:
    runs, skipped, work = build(state.problem, scorer, o.keep, o.chunk)
    # Every family gets at least one complete pool combination whatever the budget.
    coarsest = min((run.first_level() for run in runs), default=0)
    return state._replace(runs=tuple(runs), skipped=skipped, work=tuple(work),
                          coarsest=coarsest, built=True)
  pos = cut_tree.score_batch(list(state.runs), state.work, state.pos, o.chunk)
  state = state._replace(pos=pos)
  if state.starts is None and stoppable(state):
    state = state._replace(starts=tuple(cut_tree.best_candidates(run, o.keep, o.combos)
                                              for run in state.runs))
  return state


def done(state: State) -> bool:
  return state.built and state.pos >= len(state.work)


def stoppable(state: State) -> bool:
  """Once every family's coarsest level is scored."""
  return state.built and (state.pos >= len(state.work)
                          or state.work[state.pos][0] < state.coarsest)


def result(state: State) -> base.Outcome:
  """Each family's candidates (and those of its coarsest level), scored exactly."""
  families = []
  skipped = dict(state.skipped)
  for j, run in enumerate(state.runs):
    values = cut_tree.best_candidates(run, state.options.keep, state.options.combos)
    if state.starts is not None:
      values = np.concatenate([values, state.starts[j]], 0)
    if not len(values):
      skipped[run.fs.family] = (f"{run.fs.family}: the cut DP found no candidate (no "
                                "complete pool combination scored)")
      continue
    s = run.ev.scores(values)
    ranked = result_lib.rank(result_lib.Ranked(values, s.step_time_s, s.feasible, s.excess))
    families.append(base.FamilyPlans(run.fs, run.ev, ranked))
  size = sum(run.blocks.size for run in state.runs)
  return base.Outcome(families=tuple(families), skipped=skipped,
                      fields=dict(space_size=int(size)))


def cut_dp(keep: int = 2, combos: int = 8, chunk: int = evaluate.DEFAULT_CHUNK) -> base.Method:
  """The cut DP (see the module docstring and :mod:`search._src.cut_dp`) as a
  :class:`~search._src.methods.base.Method`. Deterministic.

  Args:
    keep: Best layouts each leaf keeps per pool size (the final candidates
      are the products of these).
    combos: Best pool combinations per family scored exactly.
    chunk: Leaf rows per step (and per compiled evaluation call).

  Raises:
    ValueError: for ``keep``, ``combos`` or ``chunk`` not a positive integer.
  """
  options = Options(*(base.check_int("cut_dp", n, v, 1)
                      for n, v in (("keep", keep), ("combos", combos), ("chunk", chunk))))
  return base.Method(
      name="cut_dp", init=lambda problem, seed: init(problem, seed, options), step=step,
      done=done, result=result, stoppable=stoppable,
      description="dynamic program over cuts of the stage graph, leaves scored by stage times")
