"""A family's cut tree for the dynamic program over stage cuts
(:mod:`search._src.cut_dp`), its leaves and their scoring.

The cut tree of each family:

* the root cuts generation (the engines, the rollout pool) from everything
  else: colocated in ``colocated`` (one pool of the whole cluster: engine,
  inference and training times add); split in ``split`` / ``split3``
  (synchronous: generation's output feeds training, so the times add although
  the GPU sets are disjoint) and in ``split_async`` / ``split_async_partial``
  (one step off-policy: generation overlaps training, the larger counts);
* the second cut, over the non-rollout stages, separates the actor group
  (actor, reference: the ``actor`` pool) from the critic group (critic, reward
  model: the ``critic`` pool): colocated on one training pool in the ``split``
  families (times add), split in ``split3`` (disjoint pools: the larger counts);
* the leaves are the stage groups of the family space's blocks
  (:attr:`FamilySpace.blocks`): the engine (generation), the actor (its
  training, old log-probabilities and the reference it lends its layout to),
  the critic (values, critic update) and the reward model. A leaf on a pool of
  ``g`` GPUs tries every layout the family space offers there (degree ladders,
  micro-batches, ZeRO, recompute, offload; the engine's TP/PP/EP, memory
  fraction and concurrency), scored by the cost model's stage times (the sum of
  its stages' durations in an exact estimate, the other leaves at a fixed valid
  layout), and keeps its best few feasible layouts.
"""

from __future__ import annotations

import itertools

import numpy as np

import costmodel as cm
from costmodel import internal as cmi
from search._src import evaluate
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import valid_space



def pool_key_level(key: tuple) -> int:
  """Coarseness of a pool-size key (:func:`valid_space.pool_level`)."""
  return int(valid_space.pool_level(np.asarray([key], np.float64).reshape(1, len(key)))[0])


class CutFamily:
  """One family's DP: its space, leaves (blocks), memo of leaf results and evaluator."""

  def __init__(self, fs: space_lib.FamilySpace, eff: cm.Efficiency, chunk: int, keep: int,
               ev: evaluate.Evaluator | None = None, blocks: valid_space.Blocks | None = None):
    self.fs = fs
    self.blocks = blocks if blocks is not None else valid_space.Blocks(fs)
    self.ev = ev if ev is not None else evaluate.Evaluator(fs, eff, chunk=chunk, full=True)
    self.keep = keep
    b = self.blocks
    self.leaves = []   # (name, idx, deps, {key: combo index})
    for k, (name, idx) in enumerate(b.other):
      deps = b.depends_on(name)
      _, at = np.unique(b.key_index[k], return_index=True)
      first = {tuple(b.pools[p][deps]): int(p) for p in at}
      self.leaves.append((name, idx, deps, first))
    self.memo: dict[tuple[int, tuple], tuple[np.ndarray, np.ndarray]] = {}
    # (leaf, key) -> least time of any layout, of one that fits (search._src.bound)
    self.low: dict[tuple[int, tuple], tuple[float, float]] = {}
    placement = fs.structure.placement
    self.rollout = placement.rollout_pool
    self.overlap = placement.mode.pipelined
    self.pool_names = [fs.vars[j].name.removeprefix("pool.") for j in b.pool_idx]

  def items(self) -> list[tuple[int, int, tuple]]:
    """(level, leaf, key) of every leaf evaluation, coarsest first."""
    out = [(pool_key_level(key), k, key) for k, (_, _, _, first) in enumerate(self.leaves)
           for key in first]
    return sorted(out, key=lambda t: (-t[0], t[1], t[2]))

  def first_level(self) -> int:
    """The finest level at which the coarsest complete pool combination is known."""
    pools = np.asarray(self.blocks.pools, np.int64).reshape(len(self.blocks.pools), -1)
    cols = sorted({d for _, _, deps, _ in self.leaves for d in deps})
    if not len(pools) or not cols:
      return 64
    return int(valid_space.pool_level(pools[:, cols]).max())

  def leaf_rows(self, k: int, key: tuple, heavy: bool = False) -> np.ndarray:
    """Value vectors of leaf ``k``'s valid layouts on pools ``key``, the rest
    anchored (:meth:`anchor`)."""
    _, idx, _, first = self.leaves[k]
    p = first[key]
    rows = self.blocks.rows_of(p, k)
    full = np.repeat(self.anchor(p, heavy), len(rows), 0)
    full[:, list(idx)] = rows
    return full

  def anchor(self, p: int, heavy: bool = False) -> np.ndarray:
    """[1, V] a valid plan of pool combination ``p`` whose every leaf takes its
    lightest layout (most sharding, offload and recompute, smallest micro-batches,
    engine memory and concurrency), so that a leaf's memory is judged next to
    light neighbours on a shared pool; ``heavy``: the heaviest layouts instead."""
    v = self.blocks.decode(p, 0, 1)
    for k, (_, idx, _, _) in enumerate(self.leaves):
      rows = self.blocks.rows_of(p, k)
      score = np.zeros(len(rows))
      for c, j in enumerate(idx):
        name, opts = self.fs.vars[j].name, self.fs.vars[j].options
        rank = np.searchsorted(opts, rows[:, c]) / max(len(opts) - 1, 1)
        grows = name.endswith(("mb_train", "mb_infer", "max_seqs", "memory_fraction"))
        score += rank if grows else -rank
      v[0, list(idx)] = rows[np.argmax(score) if heavy else np.argmin(score)]
    return v

  def leaf_cost(self, k: int, names: tuple, dur: np.ndarray, excess: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leaf ``k``'s stage time, feasibility and memory excess (of its own
    stages) from a batch's stage durations and memory excess ([N, S], stages
    ``names``)."""
    name = self.leaves[k][0]
    owners = cmi.stage_owners(self.fs.job)  # the engine or a role; None: no leaf
    mine = [j for j, s in enumerate(names)
            if owners.get(s) is not None and self.fs.block_of(owners[s]) == name]
    cost = dur[:, mine].sum(-1) if mine else np.zeros(dur.shape[0])
    own = excess[:, mine].sum(-1) if mine else np.zeros(dur.shape[0])
    return cost, np.isfinite(cost) & (own <= 0), own

  def combine(self, top: int) -> np.ndarray:
    """Indices of the ``top`` pool combinations of least DP cost (every leaf known)."""
    def best(k, key):
      memo = self.memo.get((k, key))
      return memo[1][0] if memo is not None and len(memo[1]) else np.inf
    total = self.totals(best)
    order = np.argsort(total, kind="stable")
    return order[np.isfinite(total[order])][:top]

  def totals(self, cost_of) -> np.ndarray:
    """[pool combinations] the cut tree's cost of each, from ``cost_of(leaf,
    key)`` (inf where unknown): on each pool its leaves' costs add; the
    disjoint non-rollout pools overlap (the larger counts); generation then
    overlaps them (a pipelined mode) or precedes them (their times add)."""
    b = self.blocks
    pool_cost = {p: np.zeros(len(b.pools)) for p in self.pool_names}
    for k, (name, _, _deps, first) in enumerate(self.leaves):
      per_key = np.full(int(b.key_index[k].max(initial=-1)) + 1, np.inf)
      for key, p in first.items():
        per_key[b.key_index[k][p]] = cost_of(k, key)
      pool = self.pool_of_leaf(name)
      pool_cost[pool] = pool_cost[pool] + per_key[b.key_index[k]]
    rest = [pool_cost[p] for p in self.pool_names if p != self.rollout]
    inner = np.max(rest, 0) if rest else np.zeros(len(b.pools))
    gen = pool_cost[self.rollout]
    return np.maximum(gen, inner) if self.overlap else gen + inner

  def pool_of_leaf(self, name: str) -> str:
    if name == self.fs.block_of("engine"):
      return self.rollout
    roles = [r for r in self.fs.structure.roles if self.fs.block_of(r) == name]
    return self.fs.structure.placement.pool_of(roles[0])

  def candidates(self, p: int, per_leaf: int) -> np.ndarray:
    """Pool combination ``p`` with every product of its leaves' best layouts."""
    b = self.blocks
    base = b.decode(p, 0, 1)[0]
    choices = []
    for k, (_, idx, deps, _) in enumerate(self.leaves):
      rows = self.memo[(k, tuple(b.pools[p][deps]))][0][:per_leaf]
      choices.append((idx, rows))
    out = []
    for pick in itertools.product(*[range(len(r)) for _, r in choices]):
      v = base.copy()
      for (idx, rows), i in zip(choices, pick, strict=True):
        v[list(idx)] = rows[i]
      out.append(v)
    return np.asarray(out)


def score_leaves(runs, work, chunk: int) -> None:
  """Scores the leaves of ``work`` ((level, run, leaf, key), coarse first), one
  batch at a time (:func:`score_batch`)."""
  pos = 0
  while pos < len(work):
    pos = score_batch(runs, work, pos, chunk)


def score_batch(runs, work, pos: int, chunk: int) -> int:
  """Scores one batch of the leaves of ``work`` from ``pos`` on: about
  ``chunk`` rows of one run (a batch ends where the next item is another
  run's); returns where the next batch starts."""
  pending, rows_in = [], 0
  r = work[pos][1]
  while pos < len(work) and work[pos][1] == r:
    _, _, k, key = work[pos]
    pending.append((r, k, key, runs[r].leaf_rows(k, key)))
    rows_in += len(pending[-1][3])
    pos += 1
    if rows_in >= chunk:
      break
  flush(runs[r], pending)
  return pos


def best_candidates(run: CutFamily, keep: int, combos: int) -> np.ndarray:
  """The DP's candidates of one family: the products of each leaf's ``keep``
  best layouts on its ``combos`` best pool combinations, valid rows only
  ([N, V]; empty when no complete combination is scored)."""
  cand = [run.candidates(p, keep) for p in run.combine(combos)]
  if not cand:
    return np.zeros((0, len(run.fs.vars)))
  values = np.concatenate(cand, 0)
  return values[run.fs.valid(values)]


def flush(run: CutFamily, pending: list) -> None:
  """Scores the pending leaf rows of one family and stores each leaf's best few."""
  values = np.concatenate([rows for _, _, _, rows in pending], 0)
  _, names, dur, ex = run.ev.stage_scores(values)
  start = 0
  for _, k, key, rows in pending:
    end = start + len(rows)
    cost, ok, excess = run.leaf_cost(k, names, dur[start:end], ex[start:end])
    # Feasible layouts by time; when none fits next to the anchor, the least
    # bad (the exact scoring of the products decides).
    order = result_lib.ranking(cost, ok, excess)[:run.keep]
    run.low[(k, key)] = (float(cost.min(initial=np.inf)),
                         float(cost[ok].min(initial=np.inf)))
    _, idx, _, _ = run.leaves[k]
    dp_cost = np.where(ok[order], cost[order], result_lib.objective(cost, ok, excess)[order])
    run.memo[(k, key)] = (rows[order][:, list(idx)], dp_cost)
    start += len(rows)
