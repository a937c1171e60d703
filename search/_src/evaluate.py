"""Exact, batched evaluation of discrete plans.

One jitted function per family structure (or shared space) evaluates a
fixed-size chunk of value vectors with the exact model (``tau = 0``), each stage
costed once per distinct input of the chunk (:func:`costmodel.internal.estimate_rows`);
larger batches are cut into chunks (the last one padded with copies, which cost
no stage twice) so memory stays bounded and nothing recompiles; the chunks of a
batch run in one thread per core. The job, cluster and efficiency parameters are
arguments, so jobs that differ only in numbers (lengths, batch sizes, hardware
figures) share the compiled code.
"""

from __future__ import annotations

import concurrent.futures
import functools
from typing import NamedTuple

import jax
import numpy as np

import costmodel as cm
from costmodel import internal as cmi
from search._src import compile_cache
from search._src import exact_programs as programs
from search._src import sharding
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


# Rows per call of the whole-estimate program (one compiled shape).
ESTIMATE_ROWS = 8


class Evaluator:
  """Counts and runs exact evaluations of one family's value vectors.

  Args:
    fs: The family space.
    efficiency: Efficiency parameters (defaults if None).
    chunk: Rows per compiled call.
    full: Score with the search's two programs: a ranking program
      (:meth:`scores`, :meth:`stage_scores`; compiled for throughput) and a
      whole-estimate program (:meth:`estimates`, ``scores(...,
      with_estimates=True)``; few rows, compiled for compile time, in the
      background once :meth:`warm` has traced the ranking program, except a
      family's own in a shared space). For
      searches and rules, which the process's other searches of the family
      share. When False, :meth:`scores` compiles a leaner program with XLA's
      default options (about twice the throughput on large chunks; for
      enumeration) and :meth:`estimates` the whole-estimate one on demand.
    shared: A space of several families that holds ``fs``
      (:class:`~search._src.shared.SharedSpace`; needs ``full``): the rows are
      scored by its programs (whole estimates: with ``shared.whole``), which
      every family's evaluator shares. None:
      with ``full``, the registered space that holds ``fs``'s structure
      (:func:`~search._src.shared.register`, a search of the job) if any;
      False: the family's own programs.
    factored: Without ``full``, score with each stage costed once per distinct
      input of a chunk (enumeration's chunks share most); False: every stage on
      every row (uniform samples of a large space, which share few).
    label_of: With ``factored`` and not ``full``: for each variable, the column
      of the labels :meth:`scores` may be given that identifies its value
      (:func:`costmodel.internal.estimate_rows`).
    tables: With ``label_of``: stage name -> ``(labels column, costs)``, the
      stage's costs looked up by each row's label in that column
      (:func:`search._src.stage_tables.build`); labelled rows are then scored
      only with a label inside every table.
    fast_ranking: The family's own ranking program compiled for compile time
      (few rows: a search without its relaxed phase; as ``shared.fast_ranking``).
  """

  def __init__(self, fs: space_lib.FamilySpace, efficiency: cm.Efficiency | None = None,
               chunk: int = DEFAULT_CHUNK, full: bool = False,
               shared: shared_lib.SharedSpace | bool | None = None, factored: bool = True,
               label_of: tuple[int, ...] | None = None, tables: dict | None = None,
               fast_ranking: bool = False):
    if not isinstance(chunk, int) or chunk < 1:
      raise ValueError(f"Evaluator: chunk={chunk!r} must be a positive integer")
    if label_of is not None and (full or not factored):
      raise ValueError("Evaluator: label_of needs factored=True and full=False (enumeration's "
                       "scorer)")
    if label_of is not None and len(label_of) != len(fs.vars):
      raise ValueError(f"Evaluator: label_of has {len(label_of)} entries for {len(fs.vars)} "
                       "variables")
    if tables and label_of is None:
      raise ValueError("Evaluator: tables need label_of (they are looked up by label)")
    if shared is None and full:
      shared = shared_lib.holding(fs.structure)
    shared = shared or None
    if shared is not None and not full:
      raise ValueError("Evaluator: shared= needs full=True (the shared programs are the "
                       "search's)")
    self.shared = shared
    self._family = shared.index_of(fs) if shared is not None else 0
    self.fs = fs
    self.eff = efficiency if efficiency is not None else cm.Efficiency()
    self.chunk = chunk
    self.full = full
    self.fast_ranking = bool(fast_ranking)
    self.factored = factored
    self.label_of = None if label_of is None else tuple(int(j) for j in label_of)
    self.tables = dict(tables or {})
    self.count = 0
    self._stage_names = None
    # kind -> this evaluator's handle on its compiled program (the programs
    # themselves are kept once per process in search._src.program_cache; the
    # handle saves computing their key on every call, which has one shape)
    self._handles = {}
    self._estimating = None  # the whole-estimate program compiling in the background

  def _shares(self, kind: str) -> bool:
    """Whether ``kind``'s program is the shared space's (whole estimates: with
    :attr:`SharedSpace.whole`)."""
    return self.shared is not None and (kind == "ranking" or self.shared.whole)

  def _args(self, part: np.ndarray, kind: str = "ranking") -> tuple:
    if self._shares(kind):
      part = self.shared.widen(self._family, part)
    # A numpy array: jnp.asarray would compile a program of its own for each new
    # shape, and the whole estimates' first rows would wait for it while XLA
    # compiles the ranking program.
    return (self.fs.job, self.fs.cluster, self.eff, np.asarray(part))

  def _run(self, kind: str, part: np.ndarray, on_traced=None):
    """One call of the ranking or whole-estimate program on ``part``; the
    whole estimates of the evaluator's family."""
    if kind == "estimates" and self._estimating is not None:
      self._estimating.result()  # compiled by warm()'s thread: wait, or raise its error
    args = self._args(part, kind)
    out = self._program(kind, args, on_traced)(*args)
    return out[self._family] if kind == "estimates" and self._shares(kind) else out

  def _program(self, kind: str, args: tuple, on_traced=None):
    """The compiled program of ``kind`` (:func:`search._src.trace_cache.compiled`,
    one per process and structure), looked up once: every call has one shape."""
    program = self._handles.get(kind)
    if program is None:
      shared = self._shares(kind)
      jitted = {("ranking", True): shared_lib.ranking, ("ranking", False): programs.ranking,
                ("estimates", True): shared_lib.estimates,
                ("estimates", False): programs.estimates}[kind, shared]
      fast = kind == "ranking" and (self.shared.fast_ranking if shared else self.fast_ranking)
      options = compile_cache.FAST_COMPILE if fast else compile_cache.EXACT[kind]
      static = self.shared if shared else self.fs.structure
      key = self.shared.structure if shared else static
      # Always compiled through the cache (a no-op callback), so the families
      # of a shared space wait for one compilation instead of starting their own.
      program = trace_cache.compiled(f"{'shared' if shared else 'exact'}_{kind}", jitted,
                                     (static,), key, args, options,
                                     on_traced=on_traced or (lambda: None))
      self._handles[kind] = program
    elif on_traced is not None:
      on_traced()
    return program

  def _run_lean(self, part: np.ndarray, labels: np.ndarray | None = None):
    """One call of the lean scorer, compiled once and called with the job's
    arrays on the device: a jitted call hashes the structure and flattens the
    job each time (about a third more time per 16,384-row chunk)."""
    kind = ("lean", labels is not None)
    program = self._handles.get(kind)
    if program is None:
      fs = self.fs
      consts = jax.device_put((fs.job, fs.cluster, self.eff))
      if labels is not None:
        cols = tuple(sorted((n, col) for n, (col, _) in self.tables.items()))
        tables = jax.device_put({n: c for n, (_, c) in self.tables.items()})
        jitted = functools.partial(programs.scores_labelled, fs.structure, self.label_of, cols)
        compiled = programs.compiled_once(("labelled", fs.structure, self.label_of, cols),
                                          jitted, (*consts, part, labels, tables))
        program = lambda part, labels: compiled(*consts, part, labels, tables)
      else:
        lean = programs.scores if self.factored else programs.scores_by_row
        compiled = programs.compiled_once((lean.__name__, fs.structure),
                                          functools.partial(lean, fs.structure), (*consts, part))
        program = functools.partial(compiled, *consts)
      self._handles[kind] = program
    return program(part) if labels is None else program(part, labels)

  def _first_rows(self, n: int) -> np.ndarray:
    row = np.asarray([[float(var.options[0]) for var in self.fs.vars]], np.float32)
    return np.repeat(row, n, 0)

  def warm(self, on_traced=None) -> None:
    """Traces and compiles the evaluator's scoring program now (one chunk of
    the options' first values, not counted), so that its compilation can run
    while other work does (the search compiles it next to the relaxed loop).
    With ``full``, the whole-estimate program starts compiling in a thread of
    its own once the ranking program is traced (:meth:`estimates` waits for
    it), unless it is a family's own in a shared space (compiled when needed).

    ``on_traced``, when given, is called once the ranking program is traced,
    before XLA compiles it (at once when it was built before; needs ``full``)."""
    if on_traced is not None and not self.full:
      raise ValueError("Evaluator.warm: on_traced needs full=True")
    if not self.full:
      labels = None if self.label_of is None else np.zeros(
          (self.chunk, max(self.label_of) + 1), np.uint32)
      jax.block_until_ready(self._run_lean(self._first_rows(self.chunk), labels))
      return

    def traced():
      if on_traced is not None:
        on_traced()
      if self.shared is None or self.shared.whole:
        self.prepare_estimates()

    jax.block_until_ready(self._run("ranking", self._first_rows(self.chunk), traced))

  def prepare_estimates(self) -> None:
    """Starts compiling the whole-estimate program in the background thread
    (nothing when it is compiled or compiling); :meth:`estimates` waits for it."""
    if not self.full:
      raise ValueError("Evaluator.prepare_estimates: whole estimates need full=True")
    if self._estimating is None and "estimates" not in self._handles:
      rows = self._first_rows(ESTIMATE_ROWS)
      self._estimating = _background().submit(
          lambda: jax.block_until_ready(self._run_estimates_now(rows)))

  def _run_estimates_now(self, rows: np.ndarray):
    args = self._args(rows, "estimates")
    return self._program("estimates", args)(*args)

  def scores(self, values: np.ndarray, with_estimates: bool = False,
             labels: np.ndarray | None = None):
    """Exact step time, feasibility and memory excess of each row.

    Args:
      values: [N, V] value vectors.
      with_estimates: Also return the rows' :class:`costmodel.Estimate` (one
        of numpy arrays with a leading axis of N), from the whole-estimate
        program (few rows); needs ``full``.
      labels: [N, L] integer labels of the rows (needs ``label_of``): rows with
        equal label ``j`` are equal on the variables ``label_of`` maps to ``j``.

    Returns:
      :class:`Scores`, or ``(Scores, Estimate)`` with ``with_estimates``.
    """
    if with_estimates and not self.full:
      raise ValueError(f"Evaluator.scores: {with_estimates=} needs full=True")
    if labels is not None:
      if self.label_of is None:
        raise ValueError("Evaluator.scores: labels need an evaluator built with label_of")
      labels = np.asarray(labels)
      if labels.ndim != 2 or labels.shape[0] != np.shape(values)[0] or not (
          np.issubdtype(labels.dtype, np.integer)):
        raise ValueError(f"Evaluator.scores: labels of shape {labels.shape} and dtype "
                         f"{labels.dtype} must be integers, one row per value vector")
      if labels.dtype != np.uint32:
        if len(labels) and (labels.min() < 0 or labels.max() >= 2**32):
          raise ValueError("Evaluator.scores: labels must lie in [0, 2**32)")
        labels = labels.astype(np.uint32)
      self._check_table_labels(labels)
    values = np.asarray(values)
    if with_estimates:
      est, excess = self._whole(values.astype(np.float32, copy=False))
      self.count += values.shape[0]
      return _finish(est.step_time_s, est.feasible, excess), est
    if not len(values):
      return _finish(np.zeros(0), np.zeros(0, bool), np.zeros(0))
    if self.full:
      pick = lambda part: self._run("ranking", part)[:3]
    elif labels is not None:
      pick = lambda part: self._run_lean(*part)[:3]
      values = (values, labels)
    else:
      pick = lambda part: self._run_lean(part)[:3]
    t, f, x = self._rows(values, pick)
    return _finish(t, f, x)

  def _check_table_labels(self, labels: np.ndarray) -> None:
    """Refuses labels outside a table (one look per column the tables read)."""
    if not len(labels):
      return
    tops = {col: labels[:, col].max() for col, _ in self.tables.values()}
    for name, (col, costs) in self.tables.items():
      size = len(jax.tree.leaves(costs)[0])
      if tops[col] >= size:
        raise ValueError(f"Evaluator.scores: labels column {col} reaches {int(tops[col])}; "
                         f"{name!r}'s table has {size} rows")

  def stage_scores(self, values: np.ndarray):
    """:meth:`scores` with each stage's duration and memory excess, from the
    ranking program (``full``).

    Returns:
      ``(Scores, stage_names, duration_s [N, S], memory_excess [N, S])``.
    """
    if not self.full:
      raise ValueError("Evaluator.stage_scores needs full=True")
    values = np.asarray(values, dtype=np.float32)
    if self._stage_names is None:
      self._stage_names = cmi.stage_names(self.fs.job, self.fs.to_plan(
          self._first_rows(1)[0].astype(np.float64)))

    def pick(part):
      t, f, x, stages = self._run("ranking", part)
      return (t, f, x, *stages[self._family])

    t, f, x, dur, ex = self._rows(values, pick)
    return _finish(t, f, x), self._stage_names, dur, ex

  def _rows(self, values, pick):
    """``pick(chunk)`` (arrays, or pytrees of them, with a leading axis of the
    chunk) over every chunk of ``values`` (an array, or a tuple of arrays of
    one length chunked alike), the padding dropped, concatenated; counts the
    rows."""
    arrays = values if isinstance(values, tuple) else (values,)
    n = arrays[0].shape[0]

    def one(start):
      # Each chunk is cut and cast to float32 in its own thread (numpy casts
      # without the GIL): cast whole before, the cast of 262,144 enumerated PPO
      # rows of 36 float64 values took a sixth of the pass.
      parts = [_chunk(a, start, self.chunk, np.float32 if k == 0 else None)
               for k, a in enumerate(arrays)]
      m = parts[0][1]
      part = tuple(p for p, _ in parts) if isinstance(values, tuple) else parts[0][0]
      return jax.tree_util.tree_map(lambda a: np.asarray(a)[:m], pick(part))

    starts = range(0, n, self.chunk)
    parts = list(_pool().map(one, starts) if len(starts) > 1 else map(one, starts))
    self.count += n
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)

  def _whole(self, values: np.ndarray):
    """``(Estimate, excess)`` of the rows (numpy, leading axis N), from the
    whole-estimate program in calls of :data:`ESTIMATE_ROWS` rows."""
    parts = []
    for start in range(0, max(values.shape[0], 1), ESTIMATE_ROWS):
      part, m = _chunk(values, start, ESTIMATE_ROWS) if len(values) else (
          self._first_rows(ESTIMATE_ROWS), 0)
      out = self._run("estimates", part) if self.full else (
          programs.estimates(self.fs.structure, *self._args(part, "estimates")))
      parts.append(jax.tree_util.tree_map(lambda a, m=m: np.asarray(a)[:m], out))
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)

  def estimates(self, values: np.ndarray) -> list[cm.Estimate]:
    """Full exact :class:`costmodel.Estimate` of each row (few rows)."""
    values = np.asarray(values, dtype=np.float32)
    if not len(values):
      return []
    est, _ = self._whole(values)
    self.count += values.shape[0]
    return [jax.tree_util.tree_map(lambda a, i=i: a[i], est) for i in range(values.shape[0])]


@functools.cache
def _background() -> concurrent.futures.ThreadPoolExecutor:
  """The thread that compiles whole-estimate programs while a search scores rows."""
  return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlcost-estimates")


@functools.cache
def _pool() -> concurrent.futures.ThreadPoolExecutor:
  """One thread per core for the chunks of a batch: XLA runs a program on one
  core, so chunks scored side by side use every core (a search's families,
  scored in threads of their own, finish at different times; the last one's
  batches then use the cores the others left)."""
  return concurrent.futures.ThreadPoolExecutor(sharding.cores(),
                                               thread_name_prefix="rlcost-chunks")


def _finish(t, f, x) -> Scores:
  """Scores in float64, a non-finite step time made inf and infeasible."""
  t = np.asarray(t, np.float64)
  bad = ~np.isfinite(t)
  return Scores(np.where(bad, np.inf, t), np.asarray(f, bool) & ~bad, np.asarray(x, np.float64))


def _chunk(values: np.ndarray, start: int, chunk: int,
           dtype=None) -> tuple[np.ndarray, int]:
  """Rows ``start:start + chunk`` of ``values`` (cast to ``dtype`` if given),
  padded to ``chunk`` rows with the last one (one compiled shape), and how many
  are real."""
  part = values[start:start + chunk]
  if dtype is not None:
    part = part.astype(dtype, copy=False)
  m = part.shape[0]
  if m < chunk:
    part = np.concatenate([part, np.repeat(part[-1:], chunk - m, 0)], 0)
  return part, m
