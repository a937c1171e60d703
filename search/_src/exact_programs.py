"""The exact programs of :mod:`search._src.evaluate`: jitted over a chunk of value
vectors, specialised on the family's structure (static), the job, cluster and
efficiency parameters as arguments; and the lean scorers compiled once per
process (:func:`compiled_once`, in :mod:`search._src.program_cache`)."""

from __future__ import annotations

import functools

import jax

import costmodel as cm
from costmodel import internal as cmi
from search._src import compile_cache
from search._src import program_cache
from search._src import space as space_lib


def _one(structure, job, cluster, eff, v):
  plan = structure.to_plan(v)
  est = cm.estimate(job, plan, cluster, eff, tau=0.0)
  excess = space_lib.memory_excess(structure, v, est, job, cluster)
  return est, excess


def _factored(structure, job, cluster, eff, values, labels=None, label_of=None, tables=None):
  """Every row's ``(Estimate, memory excess)``, each stage costed once per
  distinct input of ``values`` (:func:`costmodel.internal.estimate_rows`; grouped by
  ``labels`` where given, looked up in ``tables`` where they hold it)."""
  est, = cmi.estimate_rows(job, lambda v: ((structure.to_plan(v),), 0), values, cluster, eff,
                          labels=labels, label_of=label_of, tables=tables)
  excess = jax.vmap(lambda v, e: space_lib.memory_excess(structure, v, e, job, cluster))(
      values, est)
  return est, excess


# The lean scorers keep XLA's default options: they serve enumeration and the
# baselines, whose throughput (large chunks) the classic emitters would halve.
# Enumeration's chunks share most stage inputs (on GRPO Qwen2.5-7B, 64 H100,
# 16,384-row chunks in enumeration order, factoring is about 15x faster than
# costing row by row); on the large jobs' uniform samples costing each row is
# mostly faster (random search and annealing).
@functools.partial(jax.jit, static_argnames=("structure",))
def scores(structure, job, cluster, eff, values):
  est, excess = _factored(structure, job, cluster, eff, values)
  return est.step_time_s, est.feasible, excess


# With the rows labelled by the options of each block they take (enumeration),
# the rows of a stage are grouped by those labels rather than by the bits of
# its inputs: on GRPO Qwen2.5-7B, 64 H100, 16,384-row chunks in enumeration
# order, this takes about half the time; on uniform samples the two take about
# as long.
# ``table_cols``: stage name -> the labels column that indexes its table in
# ``tables`` (:mod:`search._src.stage_tables`).
@functools.partial(jax.jit, static_argnames=("structure", "label_of", "table_cols"))
def scores_labelled(structure, label_of, table_cols, job, cluster, eff, values, labels, tables):
  tables = {name: (col, tables[name]) for name, col in table_cols}
  est, excess = _factored(structure, job, cluster, eff, values, labels, label_of, tables)
  return est.step_time_s, est.feasible, excess


@functools.partial(jax.jit, static_argnames=("structure",))
def scores_by_row(structure, job, cluster, eff, values):
  est, excess = jax.vmap(lambda v: _one(structure, job, cluster, eff, v))(values)
  return est.step_time_s, est.feasible, excess


# The exact programs of searches and rules (``full``). The ranking program
# returns what the discrete phases read of every row (step time, feasibility,
# memory excess, and each stage's duration and memory excess for the cut DP),
# so XLA drops the rest of the estimate; it runs many times, so it is compiled
# with the classic emitters at backend optimisation level 1
# (:data:`~search._src.compile_cache.FORWARD`). The whole-estimate program
# serves few rows (a search's top plans, the rules of thumb) and is compiled
# for compile time (:data:`~search._src.compile_cache.FAST_COMPILE`). On PPO
# Llama-3.1-70B's three families (one shared program each, 2,048-row chunks)
# the two together compile about as fast as one whole-estimate program serving
# both would, and the ranking program scores a chunk about 3x faster.
@functools.partial(jax.jit, static_argnames=("structure",),
                   compiler_options=compile_cache.EXACT["ranking"])
def ranking(structure, job, cluster, eff, values):
  est, excess = _factored(structure, job, cluster, eff, values)
  return est.step_time_s, est.feasible, excess, ((est.duration_s, est.memory_excess),)


@functools.partial(jax.jit, static_argnames=("structure",),
                   compiler_options=compile_cache.EXACT["estimates"])
def estimates(structure, job, cluster, eff, values):
  return jax.vmap(lambda v: _one(structure, job, cluster, eff, v))(values)


def compiled_once(key: tuple, jitted, args: tuple):
  """``jax.jit(jitted)`` compiled for ``args``, once per process for ``key``
  and the arguments' tree, shapes and dtypes (kind ``lean`` of
  :mod:`search._src.program_cache`): the baselines build an evaluator per
  call, and a warm call must not compile its scorer again (seconds for
  DeepSeek-V3's split family on 16,384 H800)."""
  return program_cache.get("lean", (*key, program_cache.shape_key(args)),
                           lambda: jax.jit(jitted).lower(*args).compile())
