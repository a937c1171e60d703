"""The families of one search as one space: one relaxed loop and one exact
program per job.

A :class:`SharedSpace` lays the value vectors of several family spaces of one
job and cluster side by side: its columns are the union of theirs (by name)
plus a last ``family`` column, the index of the family a row belongs to. A row
of family ``k`` holds that family's values in its columns and, in columns the
family lacks, a filler (another family's first option, or its lower bound in
relaxed units) that nothing of family ``k`` reads. Both programs build every
family's plan from the row and estimate them with
:func:`costmodel.internal.estimate_shared`, which costs each stage once on the inputs of
the row's family wherever the families' stage inputs differ only in values
(the pool sizes of colocated and split plans): the program is little larger
than one family's, and it compiles once for all of them. The ranking program
also costs each stage once per distinct input of a chunk
(:func:`costmodel.internal.estimate_rows`).

* The relaxed loop (:func:`search._src.relax.run`) takes the space as it takes
  a family's: its objective and relaxed values select the row's family; the
  ``family`` column is categorical (never moved), so every start stays in its
  family and a column another family trains gets no update where the row's
  family does not read it (its bounds hold it).
  :func:`search._src.shared_relax.run` widens each family's starts, runs them
  as one batch and splits the output.
* The exact evaluator of each family (:class:`search._src.evaluate.Evaluator`
  with ``shared``) widens its rows and reads its family's scores from
  :func:`ranking` (every row the discrete phases score). Whole estimates (few
  rows: the top plans, the rules of thumb) come from :func:`estimates` with
  :attr:`SharedSpace.whole`, else from each family's own program, which only
  the families that need them compile.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import internal as cmi
from search._src import compile_cache
from search._src import relaxed_objective as objective_lib
from search._src import space as space_lib

FAMILY = "family"
"""Name of the last column: the row's family."""


class SharedSpace:
  """Several family spaces of one job and cluster as one value vector.

  Args:
    spaces: The family spaces (the same ``job`` and ``cluster`` objects; none
      with an objective of its own).
    whole: Whether its evaluators take whole estimates from one program for
      every family (:func:`estimates`, which a search then compiles in the
      background) rather than each family's own. One program compiles faster than
      all the families' own together (GRPO Qwen2.5-7B on 64 H100, two
      families), but slower than any one of them, and a search's top plans
      come from few families; where a relaxed loop compiles too, a third
      compilation competes with it and the ranking program for the cores.
    fast_ranking: Whether the ranking program is compiled for compile time
      (:data:`~search._src.compile_cache.FAST_COMPILE`) rather than for
      throughput (:data:`~search._src.compile_cache.FORWARD`): for a search
      whose discrete phases alone score few rows, so that its compilation is
      the critical path (the default job, 61,000 rows: it compiles in about
      60% of the time and scores 2,048 rows 2-3x slower).

  Raises:
    ValueError: for fewer than two spaces, spaces of different jobs or
      clusters, or a space with its own relaxed objective.
  """

  def __init__(self, spaces, whole: bool = False, fast_ranking: bool = False):
    spaces = tuple(spaces)
    self.whole = bool(whole)
    self.fast_ranking = bool(fast_ranking)
    if len(spaces) < 2:
      raise ValueError(f"SharedSpace: spaces has {len(spaces)} family, needs at least 2")
    for fs in spaces:
      if fs.job is not spaces[0].job or fs.cluster is not spaces[0].cluster:
        raise ValueError(f"SharedSpace: family {fs.family!r} has another job or cluster than "
                         f"{spaces[0].family!r}; a shared space holds one job on one cluster")
      if hasattr(fs, "relaxed_objective"):
        raise ValueError(f"SharedSpace: family {fs.family!r} brings its own objective")
    self.spaces = spaces
    self.job, self.cluster = spaces[0].job, spaces[0].cluster
    names = tuple(dict.fromkeys(n for fs in spaces for n in fs.names))
    self.names = (*names, FAMILY)
    self.columns = tuple(np.asarray([names.index(n) for n in fs.names]) for fs in spaces)
    first, trained = {}, {}
    for fs in spaces:
      train = set(objective_lib.trainable(fs))
      for j, var in enumerate(fs.vars):
        first.setdefault(var.name, var)
        if j in train:  # a column trains when any family trains it
          trained.setdefault(var.name, var)
    self.vars = (*(trained.get(n, first[n]) for n in names),
                 space_lib.Var(FAMILY, space_lib.CAT, np.arange(len(spaces), dtype=float)))
    self._filler_values = np.asarray([float(first[n].options[0]) for n in names], np.float32)
    # Relaxed fillers: each column's lower bound in its first family (a
    # categorical column: its first option).
    self._filler_x = np.zeros(len(names), np.float32)
    for fs in reversed(spaces):  # the first family that has a column sets it
      lo, _ = fs.relaxed_bounds(np.asarray([[float(v.options[0]) for v in fs.vars]]))
      self._filler_x[[names.index(n) for n in fs.names]] = lo[0]
    # What jitted code specialises on: each family's structure and variables.
    self.structure = tuple(objective_lib.static_key(fs) for fs in spaces)

  def __hash__(self):
    return hash(self.structure)

  def __eq__(self, other):
    return isinstance(other, SharedSpace) and self.structure == other.structure

  def index_of(self, fs) -> int:
    """The family index of ``fs``: the space of its structure (what the exact
    program reads of a family) among :attr:`spaces`."""
    for k, s in enumerate(self.spaces):
      if s.structure == fs.structure:
        return k
    raise ValueError(f"SharedSpace: family {fs.family!r} is not one of its spaces")


  def widen(self, k: int, rows: np.ndarray, relaxed: bool = False) -> np.ndarray:
    """Rows [N, V_k] of family ``k`` as rows of this space [N, U + 1]."""
    rows = np.asarray(rows)
    filler = self._filler_x if relaxed else self._filler_values
    out = np.repeat(np.append(filler, np.float32(k))[None, :], rows.shape[0], 0).astype(
        rows.dtype if rows.dtype.kind == "f" else np.float32)
    out[:, self.columns[k]] = rows
    return out

  def family_of(self, x: jax.Array) -> jax.Array:
    """The family index of one row (traceable)."""
    return x[-1].astype(jnp.int32)

  def relaxed_values(self, x: jax.Array, cluster_gpus) -> jax.Array:
    """Relaxed parameters -> continuous values of one row: its family's values in
    its columns (traceable; the pools share ``cluster_gpus``)."""
    fam = self.family_of(x)
    out = x
    for k, (fs, cols) in enumerate(zip(self.spaces, self.columns, strict=True)):
      out = jnp.where(fam == k, out.at[cols].set(fs.relaxed_values(x[cols], cluster_gpus)), out)
    return out

  def relaxed_objective(self, job, cluster, eff, x, tau, weight):
    """The relaxed objective of one row: its family's
    (:func:`search._src.relaxed_objective.loss_of`), with stage costs shared."""
    fam = self.family_of(x)
    values = [fs.relaxed_values(x[cols], cluster.n_gpus)
              for fs, cols in zip(self.spaces, self.columns, strict=True)]
    plans = tuple(fs.structure.to_plan(v) for fs, v in zip(self.spaces, values, strict=True))
    with cmi.positive_tau():
      ests = cmi.estimate_shared(job, plans, fam, cluster, eff, tau=tau)
    step = penalty = None
    for k, (fs, v, est) in enumerate(zip(self.spaces, values, ests, strict=True)):
      p = objective_lib.penalty_of(fs.structure, v, est, job, cluster)
      step = est.step_time_s if step is None else jnp.where(fam == k, est.step_time_s, step)
      penalty = p if penalty is None else jnp.where(fam == k, p, penalty)
    return objective_lib.loss_of(step, penalty, weight), (step, penalty)


_holding: dict = {}  # Structure -> the latest shared space that holds it


def register(space: SharedSpace) -> None:
  """Makes ``space``'s exact programs the ones the full evaluators of its
  families use in this process (:func:`holding`): a search's rules of thumb and
  later searches of the job reuse the compiled programs."""
  for fs in space.spaces:
    _holding[fs.structure] = space


def holding(structure) -> SharedSpace | None:
  """The registered shared space that holds ``structure`` (None if none)."""
  return _holding.get(structure)

def plans_of(shared: SharedSpace, v) -> tuple[tuple, jax.Array]:
  """Every family's plan of one row and the row's family (traceable), as
  :func:`costmodel.internal.estimate_shared` takes them."""
  return tuple(fs.structure.to_plan(v[cols]) for fs, cols in
               zip(shared.spaces, shared.columns, strict=True)), shared.family_of(v)


def _excess(shared: SharedSpace, job, cluster, v, ests) -> tuple:
  """Every family's memory excess of one row under its estimates."""
  return tuple(space_lib.memory_excess(fs.structure, v[cols], est, job, cluster)
               for fs, cols, est in zip(shared.spaces, shared.columns, ests, strict=True))


def estimated(shared: SharedSpace, job, cluster, eff, v):
  """Every family's ``(Estimate, memory excess)`` of one row (only the row's
  own family's is its estimate)."""
  ests = cmi.estimate_shared(job, *plans_of(shared, v), cluster, eff, tau=0.0)
  return tuple(zip(ests, _excess(shared, job, cluster, v, ests), strict=True))


# Whole estimates serve few rows (a search's top plans, the rules of thumb), so
# this program is compiled for compile time (level 0 compiles in about 60% of
# level 1's time on PPO Llama-3.1-70B's three families).
@functools.partial(jax.jit, static_argnames=("shared",),
                   compiler_options=compile_cache.EXACT["estimates"])
def estimates(shared: SharedSpace, job, cluster, eff, values):
  """Exact estimates and memory excess of rows [N, U + 1] of ``shared``, one
  ``(Estimate, excess)`` per family (the row's own family's is its estimate)."""
  return jax.vmap(lambda v: estimated(shared, job, cluster, eff, v))(values)


# What the discrete phases read of every row, without the rest of the estimates
# (their start and end times, breakdowns and throughput), which XLA then drops;
# each stage is costed once per distinct input of the chunk
# (:func:`costmodel.internal.estimate_rows`): a block sweep keeps most stages' inputs.
@functools.partial(jax.jit, static_argnames=("shared",),
                   compiler_options=compile_cache.EXACT["ranking"])
def ranking(shared: SharedSpace, job, cluster, eff, values):
  """Step time, feasibility and memory excess of rows [N, U + 1] of ``shared``
  (each its own family's), and per family ``(duration_s, memory_excess)``
  [N, stages] of its stages (the row's own family's are its own)."""
  ests = cmi.estimate_rows(job, functools.partial(plans_of, shared), values, cluster, eff)
  return picked(shared, values, ests, jax.vmap(
      lambda v, e: _excess(shared, job, cluster, v, e))(values, ests))


def picked(shared: SharedSpace, values, ests, excess) -> tuple:
  """:func:`ranking`'s outputs from every family's estimates and memory excess
  of rows ``values`` (leading axis N)."""
  fam = jax.vmap(shared.family_of)(values)
  pick = lambda outs: functools.reduce(
      lambda acc, k: jnp.where(fam == k, outs[k], acc), range(1, len(outs)), outs[0])
  return (pick([est.step_time_s for est in ests]), pick([est.feasible for est in ests]),
          pick(excess), tuple((est.duration_s, est.memory_excess) for est in ests))
