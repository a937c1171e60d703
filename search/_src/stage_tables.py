"""Stage cost tables of a family's valid space: each stage that one block of
variables decides, costed once for every valid row of that block.

A stage's inputs depend on few of a plan's variables: actor training on the
actor's layout and its pool's size, generation on the engines and the rollout
pool's size (:func:`costmodel.internal.stage_reads`). :class:`~search._src.valid_space.Blocks`
labels each row with the index of its valid row of every block, among all of
that block's valid rows over every pool size; where a stage reads only one
block's variables and the sizes of the pools that block's validity reads, that
label alone decides the stage's cost. Such a stage is costed here once per
valid row of its block, and :func:`costmodel.internal.estimate_rows` looks each plan's
cost up by its label instead of costing the stage on the distinct inputs of
every chunk: a space's plans are the product of its blocks' rows, so the
table is far smaller than the space (on PPO Qwen2.5-7B with a 1.5B reward
model, 64 H100, three pools: 1.2e13 plans; tables of 26,415 rows, one per
valid row of the actor, critic, reward and engine blocks).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm
from costmodel import internal as cmi
from search._src import space as space_lib
from search._src import valid_space

MAX_ROWS = 1 << 18
"""Blocks with more valid rows than this get no table (their stages are costed
per chunk): a table is computed before the first plan is scored."""

CHUNK = 4096
"""Rows of a block costed per call of the tables' program."""


# One program for every tabled stage of a structure, run on every block's rows
# (keeping each block's own stages), compiled once per process and structure:
# compiling dominates (for PPO's split3 family, seconds against milliseconds
# for a 4,096-row call), so a program per block would cost more than the
# stages it skips.
@functools.partial(jax.jit, static_argnames=("structure", "names"))
def _costs(structure, names, job, cluster, eff, rows):
  return cmi.stage_cost_rows(job, lambda v: ((structure.to_plan(v),), 0), rows, cluster, eff,
                            names)


def covering_blocks(fs: space_lib.FamilySpace, blocks: valid_space.Blocks) -> dict[str, int]:
  """Stage name -> the index (among ``blocks.other``) of the block whose label
  decides every label the stage's inputs read; stages that read more than one
  block, or pool sizes their block's validity does not read, are left out."""
  st = fs.structure
  reads = cmi.stage_reads(fs.job, lambda v: ((st.to_plan(v),), 0),
                         jax.ShapeDtypeStruct((len(fs.vars),), jnp.float32), fs.cluster,
                         costed_once=True)
  label_of = blocks.label_of
  m = len(blocks.pool_idx)
  out = {}
  for name, elements in reads.items():
    cols = {label_of[e] for e in elements}
    own = [c - m for c in cols if c >= m]
    if len(own) != 1:
      continue
    i = own[0]
    if {c for c in cols if c < m} <= set(blocks.depends_on(blocks.other[i][0])):
      out[name] = i
  return out


def build(fs: space_lib.FamilySpace, blocks: valid_space.Blocks,
          efficiency: cm.Efficiency | None = None) -> dict[str, tuple[int, object]]:
  """Stage name -> ``(labels column, costs)``: the tables
  :func:`costmodel.internal.estimate_rows` takes, for every stage one block decides
  (:func:`covering_blocks`) whose block has at most :data:`MAX_ROWS` valid
  rows; ``costs`` a :class:`StageCost` of numpy arrays, one entry per label."""
  eff = efficiency if efficiency is not None else cm.Efficiency()
  cover = {n: i for n, i in covering_blocks(fs, blocks).items()
           if blocks.total_rows(i) <= MAX_ROWS}
  if not cover:
    return {}
  names = tuple(sorted(cover))
  m = len(blocks.pool_idx)
  out = {}
  for i in sorted(set(cover.values())):
    rows = blocks.label_rows(i).astype(np.float32)
    n = len(rows)
    pad = np.concatenate([rows, np.repeat(rows[-1:], -n % CHUNK, 0)])
    parts = [_costs(fs.structure, names, fs.job, fs.cluster, eff, pad[s:s + CHUNK])
             for s in range(0, n, CHUNK)]
    costs = jax.tree.map(lambda *a: np.concatenate([np.asarray(x) for x in a])[:n], *parts)
    out.update({name: (m + i, costs[name]) for name in names if cover[name] == i})
  return out
