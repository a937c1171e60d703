"""The search inside families: relaxed phase, rounding, local search, sweeps.

:func:`search_family` runs one family with programs of its own;
:func:`search_shared` runs several families of a job with one relaxed loop and
one exact program (:mod:`search._src.shared`); both end in :func:`discrete`,
the family's discrete phases. The gradient search method
(:mod:`search._src.methods.gradient`) runs them phase by phase.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm
from search._src import block_sweep
from search._src import compile_cache
from search._src import cut_dp
from search._src import evaluate
from search._src import relax
from search._src import result as result_lib
from search._src import rounding
from search._src import sharding
from search._src import shared as shared_lib
from search._src import shared_relax
from search._src import space as space_lib


@dataclasses.dataclass
class FamilyRun:
  """A family's ranked plans and the evaluator that scored them."""

  fs: space_lib.FamilySpace
  ev: evaluate.Evaluator
  ranked: result_lib.Ranked


def search_family(fs: space_lib.FamilySpace, eff: cm.Efficiency, starts: int, seed: int,
                  cfg: relax.RelaxConfig, seeds: int = 16, corners: int = 32,
                  chunk: int = evaluate.DEFAULT_CHUNK, on_phase=None, dp_seeds: bool = True,
                  traced: threading.Event | None = None,
                  warm_after: tuple[threading.Event, ...] = (), relaxed: bool = True):
  """Relaxed optimisation, rounding and local search inside one family
  (:func:`relax_family`, then :func:`discrete`).

  Returns:
    ``(run, relax_output)``: the family's ranked plans and evaluator, and the
    relaxed phase's output.
  """
  ev, out, rng = relax_family(fs, eff, starts, seed, cfg, chunk=chunk, on_phase=on_phase,
                              traced=traced, warm_after=warm_after, relaxed=relaxed)
  return FamilyRun(fs=fs, ev=ev, ranked=discrete(fs, ev, out, rng, seeds, corners, dp_seeds,
                                                   on_phase)), out


def relax_family(fs: space_lib.FamilySpace, eff: cm.Efficiency, starts: int, seed: int,
                 cfg: relax.RelaxConfig, chunk: int = evaluate.DEFAULT_CHUNK, on_phase=None,
                 traced: threading.Event | None = None,
                 warm_after: tuple[threading.Event, ...] = (), relaxed: bool = True,
                 ev: evaluate.Evaluator | None = None):
  """The relaxed phase of one family with programs of its own, its exact
  evaluator compiled beside it.

  ``on_phase(family, phase)``, when given, is called as the phase ends
  (:data:`~search._src.progress.PHASES`). ``traced`` is set once the family's
  relaxed loop is traced; the exact evaluator (``ev``, or one built here with
  whole estimates) starts compiling after it and after every event of
  ``warm_after`` (the other families' relaxed loops, searched in other
  threads). Without ``relaxed`` the random starts are kept as drawn
  (:func:`at_starts`).

  Returns:
    ``(evaluator, relax_output, rng)``: the rng is the family's own
    (:func:`family_rng`), as the discrete phases go on drawing from it.
  """
  rng = family_rng(fs, seed)
  x0, lo, hi = fs.init_relaxed(rng, starts)
  phase = on_phase or (lambda family, name: None)
  # Without the relaxed phase the discrete phases alone score rows: few, so the
  # ranking program compiles for compile time (as a shared space's does).
  ev = ev if ev is not None else evaluate.Evaluator(fs, eff, chunk=chunk, full=True,
                                                    fast_ranking=not relaxed)
  # The exact evaluator compiles in a thread of its own while the relaxed loop
  # compiles and runs (XLA releases the interpreter lock), so a cold search
  # pays for the two compilations side by side, not one after the other. It
  # starts once the relaxed loop is traced (tracing holds the interpreter lock,
  # and the longer compilation should start first), or, for a small central
  # loop, before it (:func:`_exact_first`).
  traced = traced or threading.Event()
  if not relaxed:
    traced.set()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      warming = pool.submit(ev.warm)  # XLA compiles it while the starts are mapped
      out = at_starts(fs, x0)
      warming.result()
    phase(fs.family, "relaxed")
    return ev, out, rng
  exact_first = not warm_after and _exact_first(fs, cfg, -(-starts // jax.device_count()))
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    warming = _warm(pool, ev, (traced, *warm_after), exact_first)
    try:
      out = relax.run(fs, fs.job, fs.cluster, eff, x0, lo, hi, cfg, on_traced=traced.set)
    finally:
      traced.set()
    phase(fs.family, "relaxed")
    warming.result()
  return ev, out, rng


@functools.partial(jax.jit, static_argnums=0, compiler_options=compile_cache.FAST_COMPILE)
def _values_at(static: relax.Static, x, cluster_gpus):
  return jax.vmap(lambda row: static.fs.relaxed_values(row, cluster_gpus))(x)


def at_starts(space, x0: np.ndarray) -> relax.RelaxOutput:
  """The relaxed phase skipped: the random starts ``x0`` [N, V] as they are,
  with their continuous values for the rounding (one small program per
  structure); no relaxed step time or penalty (NaN) and no history (0 steps).

  Args:
    space: A family space, or a :class:`~search._src.shared.SharedSpace`
      (``x0`` widened rows), as :func:`search._src.relax.run` takes.
    x0: Relaxed parameters of the starts.
  """
  x0 = np.asarray(x0, np.float32)
  nan = np.full(len(x0), np.nan)
  steps = (0, len(space.spaces)) if isinstance(space, shared_lib.SharedSpace) else (0,)
  values = np.asarray(_values_at(relax.Static(space), jnp.asarray(x0),
                                 space.cluster.n_gpus))
  return relax.RelaxOutput(x=x0, values=values,
                           step_time_s=nan, penalty=nan, history_s=np.zeros(steps))


def family_rng(fs: space_lib.FamilySpace, seed: int) -> np.random.Generator:
  """The family's own random generator (its result does not depend on the
  other families or the order in which they finish)."""
  key = [seed, space_lib.FAMILIES.index(fs.family)]
  if fs.structure.rollout_precision != "bf16":  # its own draws; the BF16 space keeps its own
    key.append(tuple(space_lib.ROLLOUT_PRECISIONS).index(fs.structure.rollout_precision))
  return np.random.default_rng(key)


def _exact_first(fs, cfg: relax.RelaxConfig, rows_per_device: int) -> bool:
  """Whether the exact program should compile before the relaxed loop: the loop
  is a small finite-difference one (:func:`search._src.relax.small_loop`),
  whose level-0 step compiles in about half the exact program's time (the
  default job), so the exact program would otherwise finish last."""
  return cfg.gradient in relax.FINITE_DIFFERENCES and relax.small_loop(fs, cfg, rows_per_device)


def _warm(pool, ev: evaluate.Evaluator, events, exact_first: bool):
  """Starts compiling the exact evaluator in ``pool``: once every event of
  ``events`` is set (the relaxed loops are traced: the longer compilation
  starts first), or with ``exact_first`` (:func:`_exact_first`) at once,
  returning when it is traced."""
  if not exact_first:
    return pool.submit(_warm_after, ev, events)
  ready = threading.Event()

  def warm():
    try:
      ev.warm(on_traced=ready.set)
    finally:
      ready.set()

  warming = pool.submit(warm)
  ready.wait()
  return warming


def _warm_after(ev: evaluate.Evaluator, events) -> None:
  for event in events:
    event.wait()
  ev.warm()


def discrete(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, out: relax.RelaxOutput,
             rng: np.random.Generator, seeds: int = 16, corners: int = 32,
             dp_seeds: bool = True, phase=None) -> result_lib.Ranked:
  """The discrete phases of one family from its relaxed output (:func:`rounded`,
  then :func:`refined`); its ranked plans."""
  ranked, dp_ranked = rounded(fs, ev, out, rng, corners, dp_seeds, phase)
  return refined(fs, ev, ranked, dp_ranked, rng, seeds, phase)


def rounded(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, out: relax.RelaxOutput,
            rng: np.random.Generator, corners: int = 32, dp_seeds: bool = True,
            phase=None) -> tuple[result_lib.Ranked, result_lib.Ranked | None]:
  """The first discrete phase of one family: its relaxed solutions rounded to
  neighbouring valid plans and (with ``dp_seeds``) the cut DP's candidates
  (:func:`~search._src.cut_dp.family_seeds`), scored exactly.

  Returns:
    ``(ranked, dp_ranked)``: every scored candidate ranked, and the DP's
    candidates alone (None without them).
  """
  phase = phase or (lambda family, name: None)
  cand = rounding.candidates(fs, out.values, rng, corners=corners)
  ranked = rounding.score(ev, cand)
  dp = cut_dp.family_seeds(fs, ev) if dp_seeds else np.zeros((0, len(fs.vars)))
  dp_ranked = None
  if len(dp):
    dp_ranked = rounding.score(ev, dp)
    ranked = result_lib.rank(ranked, dp_ranked)
  phase(fs.family, "rounded")
  return ranked, dp_ranked


def refined(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, ranked: result_lib.Ranked,
            dp_ranked: result_lib.Ranked | None, rng: np.random.Generator, seeds: int = 16,
            phase=None) -> result_lib.Ranked:
  """The last discrete phases of one family from :func:`rounded`'s plans: a
  local search from the best ``seeds``, block sweeps from its best plans and
  the DP's (``dp_ranked``), and a local search again where a sweep improved.
  Never worse than ``ranked``'s best."""
  phase = phase or (lambda family, name: None)
  if not len(ranked.values):  # no valid plan to refine: the caller skips the family
    phase(fs.family, "refined")
    return ranked
  ranked = rounding.local_search(ev, result_lib.Ranked(*(a[:seeds] for a in ranked)))
  # The DP's own best pool splits are swept too: the relaxed candidates'
  # splits would otherwise crowd them out of the sweep's starts.
  swept = block_sweep.block_sweep(ev, ranked, rng=rng, extra=dp_ranked)
  if swept.objective[0] < ranked.objective[0] * (1 - 1e-6):
    ranked = rounding.local_search(ev, result_lib.Ranked(*(a[:4] for a in swept)))
    ranked = result_lib.rank(ranked, swept, keep=result_lib.KEEP)
  else:
    ranked = swept
  phase(fs.family, "refined")
  return ranked


def shareable(spaces) -> bool:
  """Whether the family spaces can share one relaxed loop and exact program
  (:mod:`search._src.shared`): two or more, one job and cluster, none with an
  objective of its own."""
  return (len(spaces) > 1 and all(fs.job is spaces[0].job and fs.cluster is spaces[0].cluster
                                  and not hasattr(fs, "relaxed_objective") for fs in spaces))


def search_shared(spaces, eff: cm.Efficiency, starts: int, seed: int, cfg: relax.RelaxConfig,
                  on_phase=None, dp_seeds: bool = True, relaxed: bool = True):
  """:func:`search_family` of several families at once: :func:`relax_shared`,
  then each family's discrete phases in a thread of its own (the largest
  spaces first).

  Returns:
    ``[(run, relax_output, seconds)]`` per family, in the order of ``spaces``.
  """
  t0 = time.perf_counter()
  evs, outs, rngs = relax_shared(spaces, eff, starts, seed, cfg, on_phase, relaxed)
  relaxed_s = time.perf_counter() - t0

  def one(k):
    tf = time.perf_counter()
    fs = spaces[k]
    ranked = discrete(fs, evs[k], outs[k], rngs[k], dp_seeds=dp_seeds, phase=on_phase)
    return (FamilyRun(fs=fs, ev=evs[k], ranked=ranked), outs[k],
            relaxed_s + time.perf_counter() - tf)

  return in_threads(one, spaces)


def in_threads(one, spaces) -> list:
  """``[one(k) for k in range(len(spaces))]``, each family in a thread of its
  own (:func:`workers`), the largest spaces first: their discrete phases take
  longest, and a family that waited for a thread would finish last."""
  order = sorted(range(len(spaces)), key=lambda k: -float(spaces[k].size))
  with concurrent.futures.ThreadPoolExecutor(workers(len(spaces))) as pool:
    done = dict(zip(order, pool.map(one, order), strict=True))
  return [done[k] for k in range(len(spaces))]


def relax_shared(spaces, eff: cm.Efficiency, starts: int, seed: int, cfg: relax.RelaxConfig,
                 on_phase=None, relaxed: bool = True):
  """The relaxed phase of several families at once: one relaxed loop over every
  family's starts and one exact program (:mod:`search._src.shared`), which
  compiles in a thread of its own once the loop is traced. Without ``relaxed``
  the relaxed phase is skipped (:func:`at_starts`).

  Returns:
    ``(evaluators, relax_outputs, rngs)``, one of each per family, in the
    order of ``spaces``.
  """
  phase = on_phase or (lambda family, name: None)
  # Without the relaxed loop a core idles while the ranking program compiles, and
  # the one whole-estimate program of every family compiles there (and the ranking
  # program, which then scores few rows, compiles for compile time); with it, each
  # family of the top plans compiles its own (SharedSpace.whole): the one with the
  # best relaxed time while the discrete phases run, any other at the end.
  space = shared_lib.SharedSpace(spaces, whole=not relaxed, fast_ranking=not relaxed)
  shared_lib.register(space)  # the rules of thumb and later searches reuse its program
  rngs = [family_rng(fs, seed) for fs in spaces]
  inits = [fs.init_relaxed(rng, starts) for fs, rng in zip(spaces, rngs, strict=True)]
  evs = [evaluate.Evaluator(fs, eff, full=True, shared=space) for fs in spaces]
  traced = threading.Event()
  rows = sum(len(x0) for x0, _, _ in inits)
  exact_first = _exact_first(space, cfg, shared_relax.rows_per_device(rows))
  if relaxed:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      warming = _warm(pool, evs[0], (traced,), exact_first)
      try:
        outs = shared_relax.run(space, eff, inits, cfg, on_traced=traced.set)
      finally:
        traced.set()
      _prepare_likely_top(evs, outs, cfg)
      warming.result()
  else:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      warming = pool.submit(evs[0].warm)  # XLA compiles it while the starts are mapped
      outs = shared_relax.per_family(space, inits,
                                   at_starts(space, shared_relax.widen_starts(space, inits)[0]))
      warming.result()
  for fs in spaces:
    phase(fs.family, "relaxed")
  return evs, outs, rngs


def relaxed_best(out: relax.RelaxOutput, cfg: relax.RelaxConfig) -> float:
  """The best relaxed step time of the starts whose penalty is within
  ``cfg.feasible_tol`` (NaN when none is, as without a relaxed phase)."""
  ok = out.penalty <= cfg.feasible_tol
  return float(np.min(out.step_time_s[ok])) if ok.any() else float("nan")


def _prepare_likely_top(evs, outs, cfg: relax.RelaxConfig) -> None:
  """Starts compiling the whole-estimate program of the family with the best
  relaxed step time, which the search's top plans need at the end: it was their
  family in 12 of 12 searches (PPO Llama-3.1-70B, Qwen3-235B, DeepSeek-V3 on
  H100 and H800, 3 seeds each), and it compiles while the ranking
  program finishes and the discrete phases run rather than after them."""
  best = np.asarray([relaxed_best(out, cfg) for out in outs])
  if np.isfinite(best).any():
    evs[int(np.nanargmin(best))].prepare_estimates()


def workers(n: int) -> int:
  """Threads for ``n`` families: one per CPU core this process may use."""
  return max(1, min(n, sharding.cores()))
