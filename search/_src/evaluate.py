"""Exact, batched evaluation of discrete plans.

One jitted, vmapped function per family structure evaluates a fixed-size chunk
of value vectors with the exact model (``tau = 0``); larger batches are cut
into chunks (the last one padded) so memory stays bounded and nothing
recompiles; the chunks of a batch run in one thread per core. The job, cluster and efficiency parameters are arguments, so jobs
that differ only in numbers (lengths, batch sizes, hardware figures) share the
compiled code.
"""

from __future__ import annotations

import concurrent.futures
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm
from search._src import compile_cache
from search._src import shared as shared_lib
from search._src import space as space_lib
from search._src import trace_cache

DEFAULT_CHUNK = 2048


class Scores(NamedTuple):
  """Exact results of a batch of plans (numpy).

  Attributes:
    step_time_s: Step time.
    feasible: ``Estimate.feasible``.
    excess: Memory excess relative to the limits (0 when every stage fits).
  """

  step_time_s: np.ndarray
  feasible: np.ndarray
  excess: np.ndarray


def _one(structure, job, cluster, eff, v):
  plan = structure.to_plan(v)
  est = cm.estimate(job, plan, cluster, eff, tau=0.0)
  excess = space_lib.memory_excess(structure, v, est, job, cluster)
  return est, excess


# The lean scorer keeps XLA's default options: it serves enumeration and the
# baselines, whose throughput (large chunks) the classic emitters would halve.
@functools.partial(jax.jit, static_argnames=("structure",))
def _scores(structure, job, cluster, eff, values):
  est, excess = jax.vmap(lambda v: _one(structure, job, cluster, eff, v))(values)
  return est.step_time_s, est.feasible, excess


# The exact program of searches and rules (``full``): whole estimates, compiled with the classic
# emitters at backend optimisation level 1. Measured on GRPO and PPO families:
# about half the compile time of XLA's default options and 0.4-1x their
# throughput, so the search can afford to score whole blocks of a plan
# (:func:`search._src.rounding.block_sweep`); it serves the ranking, the stage
# scores and the final estimates alike. On the default job's colocated family
# (2,048-row chunks, 2 CPU cores, 2026-12-02) it compiles in 2.4 s and scores
# 265 k plans/s, where a program of the ranking's outputs alone took 1.9 s and
# scored 322 k/s and the whole-estimate program at level 0 took 1.9 s and 116 k/s:
# one program instead of those two saves about 2.7 s of a cold search per family.
@functools.partial(jax.jit, static_argnames=("structure",),
                   compiler_options=compile_cache.FORWARD)
def _estimates(structure, job, cluster, eff, values):
  return jax.vmap(lambda v: _one(structure, job, cluster, eff, v))(values)


class Evaluator:
  """Counts and runs exact evaluations of one family's value vectors.

  Args:
    fs: The family space.
    efficiency: Efficiency parameters (defaults if None).
    chunk: Rows per compiled call.
    full: Compile one program that returns whole estimates and serves
      :meth:`scores`, :meth:`stage_scores` and :meth:`estimates` (one
      compilation, :data:`~search._src.compile_cache.FORWARD`; for searches and rules, which the
      process's other searches of the family share). When False,
      :meth:`scores` compiles a leaner program with XLA's default options that
      returns only what ranking needs (about twice the throughput on large
      chunks; for enumeration) and :meth:`estimates` a second one on demand.
    shared: A space of several families that holds ``fs``
      (:class:`~search._src.shared.SharedSpace`; needs ``full``): the rows are
      scored by its one program, which every family's evaluator shares. None:
      with ``full``, the registered space that holds ``fs``'s structure
      (:func:`~search._src.shared.register`, a search of the job) if any;
      False: the family's own program.
  """

  def __init__(self, fs: space_lib.FamilySpace, efficiency: cm.Efficiency | None = None,
               chunk: int = DEFAULT_CHUNK, full: bool = False,
               shared: shared_lib.SharedSpace | bool | None = None):
    if not isinstance(chunk, int) or chunk < 1:
      raise ValueError(f"Evaluator: chunk={chunk!r} must be a positive integer")
    if shared is None and full:
      shared = shared_lib.holding(fs.structure)
    shared = shared or None
    if shared is not None and not full:
      raise ValueError("Evaluator: shared= needs full=True (the shared program returns whole "
                       "estimates)")
    self.shared = shared
    self._family = shared.index_of(fs) if shared is not None else None
    self.fs = fs
    self.eff = efficiency if efficiency is not None else cm.Efficiency()
    self.chunk = chunk
    self.full = full
    self.count = 0
    self._stage_names = None
    self._compiled = None

  def _run_full(self, part: np.ndarray, on_traced=None):
    if self.shared is not None:
      args = (self.fs.job, self.fs.cluster, self.eff,
              jnp.asarray(self.shared.widen(self._family, part)))
      return self._program("shared_estimates", shared_lib.estimates, self.shared, args,
                           on_traced)(*args)[self._family]
    args = (self.fs.job, self.fs.cluster, self.eff, jnp.asarray(part))
    return self._program("exact_estimates", _estimates, self.fs.structure, args,
                         on_traced)(*args)

  def _program(self, name, jitted, static, args, on_traced=None):
    """The exact program (:func:`search._src.trace_cache.compiled`), looked up
    once: every call has the shape of one chunk."""
    if self._compiled is None:
      key = self.shared.structure if self.shared is not None else static
      self._compiled = trace_cache.compiled(name, jitted, (static,), key, args,
                                            compile_cache.FORWARD, on_traced=on_traced)
    elif on_traced is not None:
      on_traced()
    return self._compiled

  def _run_lean(self, part: np.ndarray):
    fs = self.fs
    return _scores(fs.structure, fs.job, fs.cluster, self.eff, jnp.asarray(part))

  def warm(self, on_traced=None) -> None:
    """Traces and compiles the evaluator's programs now (one chunk of the
    options' first values, not counted), so that their compilation can run
    while other work does (the search compiles it next to the relaxed loop).

    ``on_traced``, when given, is called once the whole-estimate program is
    traced, before XLA compiles it (at once when it was built before; needs
    ``full``)."""
    if on_traced is not None and not self.full:
      raise ValueError("Evaluator.warm: on_traced needs full=True")
    row = np.asarray([[float(var.options[0]) for var in self.fs.vars]], np.float32)
    part = np.repeat(row, self.chunk, 0)
    if self.full:
      jax.block_until_ready(self._run_full(part, on_traced))
    else:
      jax.block_until_ready(self._run_lean(part))

  def scores(self, values: np.ndarray, with_estimates: bool = False):
    """Exact step time, feasibility and memory excess of each row.

    Args:
      values: [N, V] value vectors.
      with_estimates: Also return the rows' :class:`costmodel.Estimate` (one
        of numpy arrays with a leading axis of N), from the same evaluation;
        needs ``full``.

    Returns:
      :class:`Scores`, or ``(Scores, Estimate)`` with ``with_estimates``.
    """
    if with_estimates and not self.full:
      raise ValueError(f"Evaluator.scores: {with_estimates=} needs full=True")
    values = np.asarray(values, dtype=np.float32)
    if not len(values) and not with_estimates:
      return _finish(np.zeros(0), np.zeros(0, bool), np.zeros(0))
    if self.full:
      def pick(part):
        est, excess = self._run_full(part)
        return est.step_time_s, est.feasible, excess, est if with_estimates else None
    else:
      pick = lambda part: (*self._run_lean(part)[:3], None)
    t, f, x, est = self._rows(values, pick)
    return (_finish(t, f, x), est) if with_estimates else _finish(t, f, x)

  def stage_scores(self, values: np.ndarray):
    """:meth:`scores` with each stage's duration and memory excess, read from
    the whole estimates (``full``).

    Returns:
      ``(Scores, stage_names, duration_s [N, S], memory_excess [N, S])``.
    """
    if not self.full:
      raise ValueError("Evaluator.stage_scores needs full=True")
    values = np.asarray(values, dtype=np.float32)
    if self._stage_names is None:
      self._stage_names = tuple(self.estimates(values[:1])[0].stage_names)
      self.count -= 1

    def pick(part):
      est, excess = self._run_full(part)
      return est.step_time_s, est.feasible, excess, est.end_s - est.start_s, est.memory_excess

    t, f, x, dur, ex = self._rows(values, pick)
    return _finish(t, f, x), self._stage_names, dur, ex

  def _rows(self, values: np.ndarray, pick):
    """``pick(chunk)`` (arrays, or pytrees of them, with a leading axis of the
    chunk) over every chunk of ``values``, the padding dropped, concatenated;
    counts the rows."""
    def one(start):
      part, m = _chunk(values, start, self.chunk)
      return jax.tree_util.tree_map(lambda a: np.asarray(a)[:m], pick(part))

    starts = range(0, values.shape[0], self.chunk)
    parts = list(_pool().map(one, starts) if len(starts) > 1 else map(one, starts))
    self.count += values.shape[0]
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)

  def estimates(self, values: np.ndarray) -> list[cm.Estimate]:
    """Full exact :class:`costmodel.Estimate` of each row (few rows)."""
    values = np.asarray(values, dtype=np.float32)
    out = []
    for start in range(0, values.shape[0], self.chunk):
      part = values[start:start + self.chunk]
      m = part.shape[0]
      pad = (self.chunk if self.full else min(self.chunk, _bucket(m))) - m
      if pad:
        part = np.concatenate([part, np.repeat(part[-1:], pad, 0)], 0)
      est, _ = self._run_full(part)
      est = jax.tree_util.tree_map(np.asarray, est)
      for i in range(m):
        out.append(jax.tree_util.tree_map(lambda a, i=i: a[i], est))
    self.count += values.shape[0]
    return out


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
  """One thread per core for the chunks of a batch: XLA runs a program on one
  core, so chunks scored side by side use every core (a search's families,
  scored in threads of their own, finish at different times; the last one's
  batches then use the cores the others left)."""
  return concurrent.futures.ThreadPoolExecutor(shared_lib.cores(),
                                               thread_name_prefix="rlcost-chunks")


def _finish(t, f, x) -> Scores:
  """Scores in float64, a non-finite step time made inf and infeasible."""
  t = np.asarray(t, np.float64)
  bad = ~np.isfinite(t)
  return Scores(np.where(bad, np.inf, t), np.asarray(f, bool) & ~bad, np.asarray(x, np.float64))


def _chunk(values: np.ndarray, start: int, chunk: int) -> tuple[np.ndarray, int]:
  """Rows ``start:start + chunk`` of ``values``, padded to ``chunk`` rows with
  the last one (one compiled shape), and how many are real."""
  part = values[start:start + chunk]
  m = part.shape[0]
  if m < chunk:
    part = np.concatenate([part, np.repeat(part[-1:], chunk - m, 0)], 0)
  return part, m


def _bucket(m: int) -> int:
  """Rows to compile for a small batch: 8 or a power of two (few shapes)."""
  b = 8
  while b < m:
    b *= 2
  return b
