"""Exact estimates of a batch of plans, each stage costed once per distinct input.

A search scores batches of plans that differ in few choices: a block sweep
varies one role's layout and keeps the engines and pools, so the generation
stage (the costliest) sees one input over the whole batch. :func:`estimate_rows`
costs each stage on the batch's distinct inputs only, a block of them at a time,
then assembles every row's estimate (residency, schedule, metrics) from those
costs with :func:`costmodel.internal.estimate_shared`. The cost functions and the
assembly are the model's own, so each row's estimate is ``estimate_shared``'s.

Two rows share a stage's cost when the stage's inputs under them are equal bit
for bit: the stage's group (which cost function, on which device) and the array
leaves of its layout and context (:func:`registry.array_leaves`). Rows are
grouped through a hash table of those bits, each row compared in full with the
row it is grouped with, so a hash collision can only cost a second
computation, never a wrong cost (:func:`~costmodel._src.rows.grouping.distinct`).

Building those bits costs about as much as the stages themselves on rows that
share most inputs. A caller that knows its rows' structure may label them
instead (``labels``): an exhaustive enumeration knows which option of each
block of variables a row takes. A stage's rows are then grouped by the labels
of the row elements its inputs may depend on, found once per trace by following
them through the program that computes the inputs from the row
(:func:`dependence.element_dependence`, which can only list too many).

Where one label decides a stage's inputs over a whole space (an enumeration
labels each block's valid rows, and a stage may read one block only), the
caller may cost the stage once per label beforehand (:func:`stage_cost_rows`)
and pass the table (``tables``): the stage is then looked up, not costed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.rows import dependence
from costmodel._src.rows import grouping
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.stages import registry
from costmodel._src.step import algorithms as alg
from costmodel._src.step import estimate as estimate_lib

BLOCK = 64
"""Distinct inputs of a stage costed per step of its loop. On 2,048-row chunks of
PPO Llama-3.1-70B's three families, blocks of 64 and 128 score sampled rows
alike and 64 is the faster on repeated rows; 32 is about 40% slower on sampled
rows."""

FACTORED_KINDS = (alg.GENERATE, alg.INFER, alg.TRAIN)
"""Stage kinds costed once per distinct input; the others (the weight sync, CPU
scoring) cost less than finding their distinct inputs and are costed per row."""


def _kinds(job: RLJob) -> dict[str, str]:
  """Stage name -> kind, for every stage of the job's graph."""
  return {st.name: st.kind for st in alg.stage_graph(job)}


def estimate_rows(job: RLJob, plans_of, rows: jax.Array, cluster: Cluster,
                  efficiency: Efficiency | None = None, block: int = BLOCK,
                  labels: jax.Array | None = None,
                  label_of: tuple[int, ...] | None = None,
                  tables: dict | None = None) -> tuple:
  """Exact estimates of every row, each stage costed once per distinct input.

  Traceable (one compiled program serves any batch of the shape): the work of a
  stage grows with its distinct inputs in the batch, not with the rows.

  Args:
    job: The RL job.
    plans_of: ``row -> (plans, which)`` (traceable; the same structure for every
      row), as :func:`costmodel.internal.estimate_shared` takes them.
    rows: [N, ...] rows.
    cluster: The cluster.
    efficiency: Efficiency parameters (defaults if None).
    block: Distinct inputs of a stage costed at once.
    labels: [N, L] integer labels of the rows (with ``label_of``), or None to
      group rows by the bits of each stage's inputs. The caller's promise: two
      rows with equal label ``j`` are equal on every row element ``e`` with
      ``label_of[e] == j`` (an enumeration labels each block of variables with
      the index of the option combination it takes).
    label_of: Static: for each element of a row (raveled), the column of
      ``labels`` that identifies it.
    tables: Stage name -> ``(column, costs)``: the stage's costs computed
      beforehand (:func:`stage_cost_rows`), a :class:`StageCost` with a
      leading axis T, and the column of ``labels`` that indexes them: the
      caller's promise that the stage costs ``costs[labels[i, column]]`` under
      row ``i``. A label outside ``[0, T)`` gives a NaN cost (the row's step
      time is NaN), never another row's. Needs ``labels``.

  Returns:
    ``jax.vmap(lambda r: estimate_shared(job, *plans_of(r), cluster,
    efficiency))(rows)``: one :class:`Estimate` per plan, leading axis N.

  Raises:
    ValueError: for a block that is not a positive integer, labels that do
      not match the rows (``label_of`` one entry per row element, each a column
      of ``labels``; one label per row), or tables without labels, for a stage
      of another kind than generation, inference or training, or indexed by a
      column ``labels`` lacks.
  """
  if not isinstance(block, int) or isinstance(block, bool) or block < 1:
    raise ValueError(f"estimate_rows: block={block!r} must be a positive integer")
  eff = efficiency if efficiency is not None else Efficiency()
  kinds = _kinds(job)
  tables = dict(tables or {})
  _check_tables(tables, labels, kinds)
  if labels is None:
    if label_of is not None:
      raise ValueError("estimate_rows: label_of needs labels")
    keys = jax.vmap(lambda r: _keys(job, plans_of, r, cluster))(rows)
    groups = {name: grouping.distinct(k) if kinds[name] in FACTORED_KINDS else None
              for name, k in keys.items()}
  else:
    groups = _labelled(job, plans_of, rows, cluster, labels, label_of, kinds, set(tables))
  costs = {name: _looked_up(tables[name], labels) if name in tables else
           _costed(job, plans_of, rows, cluster, eff, name, g, block)
           for name, g in groups.items()}
  return jax.vmap(lambda r, c: estimate_lib.estimate_shared(
      job, *plans_of(r), cluster, eff, stage_costs=c))(rows, costs)


def stage_cost_rows(job: RLJob, plans_of, rows: jax.Array, cluster: Cluster,
                    efficiency: Efficiency | None = None,
                    names: tuple[str, ...] | None = None) -> dict:
  """Stage name -> its cost under every row (a :class:`StageCost` with a
  leading axis N), each row costed on its own: the tables
  :func:`estimate_rows` may be given. Arguments as there; ``names``: the
  stages (default: every generation, inference and training stage)."""
  eff = efficiency if efficiency is not None else Efficiency()
  kinds = _kinds(job)
  if names is None:
    names = tuple(n for n, k in kinds.items() if k in FACTORED_KINDS)
  bad = [n for n in names if n not in kinds]
  if bad:
    raise ValueError(f"stage_cost_rows: names={tuple(names)} holds {bad}, not stages of "
                     f"{job.algorithm}'s graph {tuple(kinds)}")
  return {n: _costed(job, plans_of, rows, cluster, eff, n, None, BLOCK) for n in names}


def _check_tables(tables: dict, labels, kinds: dict) -> None:
  """Refuses tables :func:`estimate_rows` cannot use (see there)."""
  if not tables:
    return
  if labels is None:
    raise ValueError(f"estimate_rows: tables for {sorted(tables)} need labels")
  for name, (col, _) in tables.items():
    if kinds.get(name) not in FACTORED_KINDS:
      raise ValueError(f"estimate_rows: tables[{name!r}]: {name!r} is not a generation, "
                       f"inference or training stage of {tuple(kinds)}")
    if not isinstance(col, (int, np.integer)) or not 0 <= int(col) < labels.shape[-1]:
      raise ValueError(f"estimate_rows: tables[{name!r}] is indexed by column {col!r}; "
                       f"labels have {labels.shape[-1]}")


def _looked_up(table, labels):
  """The costs ``table[1]`` at each row's label in column ``table[0]`` (NaN
  outside the table)."""
  col, costs = table
  at = labels[:, int(col)].astype(jnp.int32)
  return jax.tree.map(lambda t: jnp.take(t, at, axis=0, mode="fill",
                                         fill_value=jnp.nan if jnp.issubdtype(
                                             t.dtype, jnp.floating) else None), costs)


def distinct_inputs(job: RLJob, plans_of, rows: jax.Array, cluster: Cluster) -> dict:
  """Stage name -> how many distinct inputs it has over ``rows`` (what
  :func:`estimate_rows` costs; arguments as there). Traceable."""
  keys = jax.vmap(lambda r: _keys(job, plans_of, r, cluster))(rows)
  return {name: grouping.distinct(k)[2] for name, k in keys.items()}


def _group_index(which, groups) -> jax.Array:
  """Index among ``groups`` of the group that holds plan ``which`` (0 if none)."""
  out = jnp.zeros((), jnp.int32)
  for g, (members, _, _) in enumerate(groups):
    out = jnp.where(jnp.isin(which, jnp.asarray(members)), g, out)
  return out


def _keys(job, plans_of, row, cluster) -> dict[str, jax.Array]:
  """Stage name -> the bits its cost depends on under ``row``: the group of the
  plan meant and every group's input leaves."""
  plans, which = plans_of(row)
  out = {}
  for name, groups in estimate_lib.stage_groups(job, plans, which, cluster).items():
    words = [grouping.bits(_group_index(which, groups))]
    words += [grouping.bits(x) for _, _, inputs in groups for x in registry.array_leaves(inputs)]
    out[name] = jnp.concatenate(words)
  return out


def stage_reads(job: RLJob, plans_of, row: jax.ShapeDtypeStruct, cluster: Cluster,
                costed_once: bool = False) -> dict[str, frozenset[int]]:
  """Stage name -> the elements of a row (raveled) its inputs may depend on (a
  superset; :func:`dependence.element_dependence` of what :func:`_keys` reads);
  with ``costed_once``, only the stages :func:`estimate_rows` costs once per
  distinct input (generation, inference, training). Traceable: ``job`` and
  ``cluster`` may be traced."""
  keys = lambda r: _keys(job, plans_of, r, cluster)
  names = sorted(jax.eval_shape(keys, row))  # a dict's leaves come in key order
  out = dict(zip(names, dependence.element_dependence(keys, row), strict=True))
  if costed_once:
    kinds = _kinds(job)
    out = {n: r for n, r in out.items() if kinds[n] in FACTORED_KINDS}
  return out


def _labelled(job, plans_of, rows, cluster, labels, label_of, kinds, tabled=()) -> dict:
  """Stage name -> :func:`~costmodel._src.rows.grouping.distinct` of the labels of the row elements its
  inputs read (stages that read the same labels share one grouping), or None
  for the stages costed on every row or looked up in ``tabled``'s tables."""
  n = rows.shape[0]
  width = int(np.prod(rows.shape[1:], dtype=int))
  if label_of is None or len(label_of) != width:
    raise ValueError(f"estimate_rows: label_of has {None if label_of is None else len(label_of)} "
                     f"entries; it needs one per row element ({width})")
  if labels.ndim != 2 or labels.shape[0] != n:
    raise ValueError(f"estimate_rows: labels of shape {tuple(labels.shape)} must be "
                     f"[{n}, L] (one row of labels per row)")
  if any(not 0 <= int(j) < labels.shape[1] for j in label_of):
    raise ValueError(f"estimate_rows: label_of={tuple(label_of)} names columns outside "
                     f"the {labels.shape[1]} of labels")
  reads = stage_reads(job, plans_of, jax.ShapeDtypeStruct(rows.shape[1:], rows.dtype), cluster)
  words = labels.astype(jnp.uint32)
  shared, out = {}, {}
  for name, kind in kinds.items():
    if kind not in FACTORED_KINDS or name in tabled:
      out[name] = None
      continue
    cols = tuple(sorted({int(label_of[e]) for e in reads[name]}))
    if cols not in shared:
      shared[cols] = grouping.distinct(words[:, list(cols)] if cols else jnp.zeros((n, 1), jnp.uint32))
    out[name] = shared[cols]
  return out


def _pick(which, groups, costs):
  """The cost of the group that holds plan ``which``."""
  if len(costs) == 1:
    return costs[0]
  g = _group_index(which, groups)
  return jax.tree.map(lambda *xs: jnp.select([g == i for i in range(len(xs))], xs), *costs)


def _costed(job, plans_of, rows, cluster, eff, name, group, block):
  """Stage ``name``'s cost under every row: computed once per distinct input in
  a loop over blocks of them (``group``: :func:`~costmodel._src.rows.grouping.distinct`'s answer), or on every
  row where ``group`` is None."""

  def cost_of(job, cluster, eff, row):
    plans, which = plans_of(row)
    groups = estimate_lib.stage_groups(job, plans, which, cluster, names=(name,))[name]
    return _pick(which, groups, [registry.group_cost(stage, job, inputs, eff, 0.0)
                                 for _, stage, inputs in groups])

  # A jitted function of explicit arguments: the loop's body and its buffers'
  # shapes share one trace.
  blocked = jax.jit(jax.vmap(cost_of, in_axes=(None, None, None, 0)))
  if group is None:
    return blocked(job, cluster, eff, rows)
  n = rows.shape[0]
  firsts, inverse, count = group
  steps = -(-n // block)
  firsts = jnp.concatenate([firsts, jnp.zeros((steps * block - n,), jnp.int32)])
  return grouping.blocks(lambda i: blocked(job, cluster, eff, rows[i]), firsts, count, block, inverse)
