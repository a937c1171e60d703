"""Exhaustive enumeration as a method: every valid plan of each family scored
exactly, one chunk a step (the families in turn), a running top-k kept.

Each family's valid space is walked block by block
(:class:`~search._src.valid_space.Blocks`): for every combination of pool
sizes, each block of variables is enumerated and filtered on its own, and the
product of the valid blocks is decoded chunk by chunk (mixed radix), so memory
stays bounded by the chunk size whatever the size of the space. The next chunk
is decoded in a thread while the last one is scored (in compiled calls on every
core).
"""

from __future__ import annotations

import concurrent.futures
from typing import NamedTuple

from search._src import baseline_run
from search._src.methods import base
from search._src.methods import family_runs


class Walk(NamedTuple):
  """One family's enumeration: its chunks, the next one being decoded, and
  the chunks scored."""

  chunks: object
  ahead: concurrent.futures.Future | None
  scored: int = 0


class State(NamedTuple):
  """Enumeration's state.

  Attributes:
    problem: What is searched.
    chunk_size: Plans decoded and scored a step.
    max_plans: Refuse a family with more valid plans (None: no limit).
    runs: Per family: its run once built, or why it holds no plan (None: not
      built yet).
    walks: Per family, its walk (None before it is built; its ``ahead`` None
      once every chunk is scored).
    pool: The thread that decodes the next chunks.
    step: Steps done.
  """

  problem: base.Problem
  chunk_size: int
  max_plans: int | None
  runs: tuple
  walks: tuple
  pool: concurrent.futures.ThreadPoolExecutor
  step: int = 0


def init(problem: base.Problem, seed: int, chunk_size: int, max_plans: int | None) -> State:
  del seed  # deterministic
  n = len(problem.families)
  return State(problem=problem, chunk_size=chunk_size, max_plans=max_plans, runs=(None,) * n,
               walks=(None,) * n,
               pool=concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlcost-decode"))


def _open(state: State, k: int) -> bool:
  r, w = state.runs[k], state.walks[k]
  return not isinstance(r, str) and (w is None or w.ahead is not None)


def step(state: State, scorer: base.Scorer) -> State:
  """Scores the next chunk of the next family not yet walked through (building
  its run and starting its walk first)."""
  active = [k for k in range(len(state.runs)) if _open(state, k)]
  k = active[state.step % len(active)]
  runs, walks = list(state.runs), list(state.walks)
  if runs[k] is None:
    family = state.problem.families[k]
    runs[k] = family_runs.build(state.problem, family, scorer,
                                min(state.chunk_size, baseline_run.ENUMERATION_CHUNK),
                                kind="enumerate")
    if not isinstance(runs[k], str):
      size = runs[k].blocks.size
      if state.max_plans is not None and size > state.max_plans:
        state.pool.shutdown(wait=False)
        raise ValueError(f"enumerate: family {family!r} has {size:,} valid plans, more "
                         f"than max_plans={state.max_plans:,}")
      chunks = runs[k].blocks.chunks(state.chunk_size)
      walks[k] = Walk(chunks, state.pool.submit(next, chunks, None))
  if not isinstance(runs[k], str):
    w = walks[k]
    part = w.ahead.result()
    if part is None:
      walks[k] = w._replace(ahead=None)
    else:
      ahead = state.pool.submit(next, w.chunks, None)  # decoded while this one is scored
      runs[k].scores(part[0], part[1])
      if ahead.done() and ahead.result() is None:  # that was the last chunk
        ahead = None
      walks[k] = w._replace(ahead=ahead, scored=w.scored + 1)
  state = state._replace(runs=tuple(runs), walks=tuple(walks), step=state.step + 1)
  if done(state):
    state.pool.shutdown(wait=False)
  return state


def done(state: State) -> bool:
  """When every family's valid plans are scored."""
  return not any(_open(state, k) for k in range(len(state.runs)))


def stoppable(state: State) -> bool:
  """Once every family that holds plans has scored a chunk."""
  return all(isinstance(r, str) or (w is not None and (w.scored or w.ahead is None))
             for r, w in zip(state.runs, state.walks, strict=True))


def result(state: State) -> base.Outcome:
  for w in state.walks:
    if w is not None and w.ahead is not None:
      w.ahead.cancel()
  state.pool.shutdown(wait=False, cancel_futures=True)
  skipped = {f: r for f, r in zip(state.problem.families, state.runs, strict=True)
             if isinstance(r, str)}
  size = sum(r.blocks.size for r in state.runs if not isinstance(r, (str, type(None))))
  return family_runs.outcome(state.runs, skipped, space_size=int(size))


def enumeration(chunk_size: int = 65536, max_plans: int | None = None) -> base.Method:
  """Exhaustive enumeration (see the module docstring) as a
  :class:`~search._src.methods.base.Method`.

  Args:
    chunk_size: Plans decoded and scored a step (memory is bounded by it), in
      compiled calls of at most :data:`search._src.baseline_run.ENUMERATION_CHUNK` rows.
    max_plans: Refuse a family with more valid plans than this (None: no limit).

  Raises:
    ValueError: for a ``chunk_size`` or ``max_plans`` that is not a positive
      integer; when run, a family with more than ``max_plans`` valid plans.
  """
  if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
    raise ValueError(f"enumerate: chunk_size={chunk_size!r} must be a positive integer")
  if max_plans is not None:
    base.check_int("enumerate", "max_plans", max_plans, 1)
  return base.Method(
      name="enumerate",
      init=lambda problem, seed: init(problem, seed, chunk_size, max_plans), step=step,
      done=done, result=result, stoppable=stoppable,
      description="every valid plan scored exactly")
