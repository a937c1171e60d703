"""The gradient search as a method: relax, round, refine.

For each placement family (each rollout format beyond BF16 a space of its
own, labelled ``family+fp8``):

1. ``relax``: ``starts`` random starts are optimised together on the relaxed
   model (:mod:`search._src.relax`) when the space is large (``relaxed``,
   :func:`relaxes`), else kept as drawn; the families of a job share one
   relaxed loop and one exact program (:mod:`search._src.shared`), which
   compiles beside the loop;
2. ``round``: the relaxed solutions are rounded to neighbouring valid plans,
   scored exactly next to the cut DP's candidates on the family's coarsest
   pool sizes (``dp_seeds``);
3. ``refine``: a discrete local search from the best of them, block sweeps
   (:func:`~search._src.block_sweep.block_sweep`) and a local search again
   where a sweep improved.

Each step runs its phase for every family, one thread per core, the largest
spaces first (:func:`search._src.family_search.in_threads`). A run out of
budget stops after the rounding at the earliest: its plans are the rounded
candidates.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time
from typing import NamedTuple

from absl import flags
from absl import logging
import numpy as np

from search._src import family_search
from search._src import frameworks as fw_lib
from search._src import progress as progress_lib
from search._src import relax
from search._src.methods import base

# Relaxed starts per family. On the 24 enumerable problems of
# ``benchmarks.search_steps`` 16 starts find the exhaustive optimum as 32 and 64
# do (gap 0.00% on all 24, benchmarks/results/search_steps.md), and a quarter
# of 64 starts cuts the default job's warm search by more than half and its cold
# one by about a third.
DEFAULT_STARTS = 16

RELAXED = ("auto", "on", "off")

# ``relaxed="auto"`` runs the relaxed phase from this many value vectors in a
# family's space (``FamilySpace.size``, before validity checks): between the
# largest space where the discrete phases alone found every plan it found (the
# default job's split family, 1.3e10) and the smallest where it found a better
# one (Qwen3-235B's split family on 512 GPUs, 4.0e12).
RELAX_MIN_PLANS = 1e11

# The phases, one per step.
PHASES = ("relax", "round", "refine")


def relaxes(relaxed: str, spaces, dp_seeds: bool = True) -> bool:
  """Whether a search with ``relaxed`` (``auto``, ``on``, ``off``) over the
  family ``spaces`` runs its relaxed phase: ``auto`` when a space holds at least
  :data:`RELAX_MIN_PLANS` value vectors or without the cut DP's seeds (then the
  relaxed solutions are the only informed starts)."""
  if relaxed == "auto":
    return not dp_seeds or any(float(fs.size) >= RELAX_MIN_PLANS for fs in spaces)
  return relaxed == "on"


class Options(NamedTuple):
  """The gradient search's settings (:func:`gradient`)."""

  starts: int = DEFAULT_STARTS
  relax_config: relax.RelaxConfig = relax.RelaxConfig()
  dp_seeds: bool = True
  relaxed: str = "auto"
  seeds: int = 16
  corners: int = 32


class State(NamedTuple):
  """The gradient search's state.

  Attributes:
    problem: What is searched.
    options: The settings.
    seed: The seed (each family draws from its own generator).
    phase: Phases done (an index into :data:`PHASES`).
    labels: Each space's name in the result.
    spaces: The family spaces (one per family and rollout format).
    relaxed: Whether the relaxed phase runs.
    evaluators: Each space's exact evaluator (after ``relax``).
    relaxed_out: Each space's relaxed output (after ``relax``).
    rngs: Each space's random generator.
    ranked: Each space's ranked plans (after ``round``).
    dp_ranked: Each space's cut-DP candidates, scored (None without them).
    seconds: Each space's wall seconds so far.
    bar: The progress bar.
  """

  problem: base.Problem
  options: Options
  seed: int
  phase: int = 0
  labels: tuple = ()
  spaces: tuple = ()
  relaxed: bool = False
  evaluators: tuple = ()
  relaxed_out: tuple = ()
  rngs: tuple = ()
  ranked: tuple = ()
  dp_ranked: tuple = ()
  seconds: tuple = ()
  bar: progress_lib.Bar | None = None


def _label(family: str, rollout_precision: str) -> str:
  """A family's name in the results, with its rollout format beyond BF16."""
  return family if rollout_precision == "bf16" else f"{family}+{rollout_precision}"


def init(problem: base.Problem, seed: int, options: Options) -> State:
  """Builds the family spaces (no scoring)."""
  fw = fw_lib.get(problem.framework)
  pairs = [(_label(fam, prec), fw.build(fam, problem.job, problem.cluster, problem.options, prec))
           for fam in problem.families
           for prec in fw.rollout_precisions(problem.options, problem.cluster)]
  spaces = tuple(fs for _, fs in pairs)
  return State(problem=problem, options=options, seed=seed, labels=tuple(lab for lab, _ in pairs),
               spaces=spaces, relaxed=relaxes(options.relaxed, spaces, options.dp_seeds),
               seconds=(0.0,) * len(spaces),
               bar=progress_lib.Bar(len(spaces), enabled=problem.progress))


def step(state: State, scorer: base.Scorer) -> State:
  """Runs the next phase (:data:`PHASES`) for every family."""
  t0 = time.perf_counter()
  if state.phase == 0 and state.bar is not None:
    state.bar.__enter__()
  state = (_relax, _round, _refine)[state.phase](state, scorer)
  spent = time.perf_counter() - t0
  state = state._replace(phase=state.phase + 1,
                         seconds=tuple(s + spent for s in state.seconds))
  if done(state):
    _close(state)
  return state


def _relax(state: State, scorer: base.Scorer) -> State:
  spaces, o = list(state.spaces), state.options
  eff, cfg = scorer.efficiency, o.relax_config
  phase = state.bar.phase if state.bar is not None else None
  if family_search.shareable(spaces):
    evs, outs, rngs = family_search.relax_shared(spaces, eff, o.starts, state.seed, cfg,
                                                 on_phase=phase, relaxed=state.relaxed)
    evs = [scorer.adopt(ev) for ev in evs]
  else:
    # Each family in a thread: JAX releases the interpreter lock while XLA
    # compiles and runs, so the families' programs compile on separate cores.
    # The exact evaluators wait for the relaxed loops of the families that start
    # at once (one per thread) to be traced: the relaxed loops compile longest.
    traced = [threading.Event() for _ in spaces]
    first = tuple(traced[:family_search.workers(len(spaces))]) if state.relaxed else ()

    def one(k):
      try:
        return family_search.relax_family(
            spaces[k], eff, o.starts, state.seed, cfg, on_phase=phase, traced=traced[k],
            warm_after=first, relaxed=state.relaxed,
            ev=scorer.evaluator(spaces[k], full=True, fast_ranking=not state.relaxed))
      finally:
        traced[k].set()  # also when the family failed before its relaxed loop

    with concurrent.futures.ThreadPoolExecutor(family_search.workers(len(spaces))) as pool:
      evs, outs, rngs = zip(*pool.map(one, range(len(spaces))), strict=True)
  return state._replace(evaluators=tuple(evs), relaxed_out=tuple(outs), rngs=tuple(rngs))


def _round(state: State, scorer: base.Scorer) -> State:
  del scorer
  phase = state.bar.phase if state.bar is not None else None
  o = state.options

  def one(k):
    return family_search.rounded(state.spaces[k], state.evaluators[k], state.relaxed_out[k],
                                 state.rngs[k], o.corners, o.dp_seeds, phase)

  ranked, dp_ranked = zip(*family_search.in_threads(one, state.spaces), strict=True)
  return state._replace(ranked=tuple(ranked), dp_ranked=tuple(dp_ranked))


def _refine(state: State, scorer: base.Scorer) -> State:
  del scorer
  phase = state.bar.phase if state.bar is not None else None

  def one(k):
    return family_search.refined(state.spaces[k], state.evaluators[k], state.ranked[k],
                                 state.dp_ranked[k], state.rngs[k], state.options.seeds, phase)

  return state._replace(ranked=tuple(family_search.in_threads(one, state.spaces)))


def done(state: State) -> bool:
  return state.phase >= len(PHASES) or not state.spaces


def stoppable(state: State) -> bool:
  """After the rounding: every family holds scored plans."""
  return state.phase >= 2 or not state.spaces


def _close(state: State) -> None:
  if state.bar is not None:
    state.bar.__exit__(None, None, None)


def _progress(message: str) -> None:
  """absl INFO once absl's flags are parsed (a command line: shown with
  ``--verbose``), else a line on stderr."""
  if flags.FLAGS.is_parsed():
    logging.info(message)
  else:
    print(message, file=sys.stderr, flush=True)


def result(state: State) -> base.Outcome:
  """Each family's ranked plans; ``relaxed_bound_s`` and ``history`` per family."""
  _close(state)
  fw_name = fw_lib.get(state.problem.framework).name
  families, skipped, history, bound = [], {}, {}, {}
  cfg = state.options.relax_config
  for k, label in enumerate(state.labels):
    if k < len(state.relaxed_out):
      out = state.relaxed_out[k]
      history[label] = out.history_s
      bound[label] = family_search.relaxed_best(out, cfg)
    if k >= len(state.ranked):
      continue
    r = state.ranked[k]
    if not len(r.feasible):  # no rounded, seeded or swept row is a valid plan
      skipped[label] = (f"{label}: no valid plan found (every candidate breaks a rule of "
                        f"{fw_name}'s space)")
      continue
    ev = state.evaluators[k]
    families.append(base.FamilyPlans(state.spaces[k], ev, r, label))
    if state.problem.progress:
      best = float(r.step_time_s[0]) if r.feasible[0] else np.inf
      relaxed_s = f"{bound[label]:8.2f} s" if np.isfinite(bound[label]) else f"{'-':>10}"
      _progress(f"family {label:<20} relaxed {relaxed_s}  rounded {best:8.2f} s"
                f"  {ev.count:7d} evaluations  {state.seconds[k]:.1f} s")
  return base.Outcome(families=tuple(families), skipped=skipped,
                      fields=dict(relaxed_bound_s=bound, history=history,
                                  relaxed=state.relaxed))


def gradient(starts: int = DEFAULT_STARTS, steps: int | None = None,
             relax_config: relax.RelaxConfig | None = None, dp_seeds: bool = True,
             relaxed: str = "auto") -> base.Method:
  """The gradient search (see the module docstring) as a :class:`Method`.

  Args:
    starts: Random starts per family, optimised together.
    steps: Relaxed optimisation steps (None: ``relax_config``'s).
    relax_config: Schedules of the relaxed phase (defaults if None).
    dp_seeds: Start the discrete phase from the cut DP's candidates too.
    relaxed: The relaxed phase: ``on``, ``off`` or ``auto`` (:func:`relaxes`).

  Raises:
    ValueError: for non-positive ``starts`` or ``steps``, or ``relaxed`` not
      one of :data:`RELAXED`.
  """
  base.check_int("gradient", "starts", starts, 1)
  cfg = relax_config or relax.RelaxConfig()
  if steps is not None:
    cfg = cfg._replace(steps=base.check_int("gradient", "steps", steps, 1))
  if relaxed not in RELAXED:
    raise ValueError(f"gradient: relaxed={relaxed!r} must be one of {RELAXED}")
  options = Options(starts=int(starts), relax_config=cfg, dp_seeds=bool(dp_seeds),
                    relaxed=relaxed)
  return base.Method(
      name="optimize", init=lambda problem, seed: init(problem, seed, options), step=step,
      done=done, result=result, stoppable=stoppable,
      description="relaxed gradient descent from random starts, rounding, local search "
      "and block sweeps")
