"""A baseline planner: a dynamic program over cuts of the stage graph.

In the style of RLinf's open auto-placement planner (its idea, not its code:
github.com/RLinf/RLinf, ``toolkits/auto_placement/placement.py`` at commit
6c6b2c04030b9eefb09707d40e916d4f22ace8b2, where a collocated merge of two
sub-schedules adds their costs and a disaggregated one pipelines them, the
slower side's per-batch cost setting the pace), run on this project's cost
model. The stage graph of an RL step is cut recursively; at each cut the two
sides are either *colocated* (one GPU set, time-shared: their times add) or
*split* onto disjoint GPU sets (their times overlap where the stage graph lets
them: the larger one counts), with every split of the GPUs tried; the leaves
choose each stage group's layout.

Only cuts that map onto a placement the project expresses
(:func:`costmodel.placements` of the job, filtered by the framework and the
modes the user allows, :func:`search._src.frameworks.families_for`) are
admitted. The cut tree of each family:

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

Every pool combination the family's space allows is a split the DP tries; the
leaves are evaluated once per pool size and shared by all the splits that use
that size (the DP's memo). Sizes are visited coarse to fine (multiples of
large powers of two first), so a time budget cuts the finest splits, not whole
families. The DP's best few combinations per family, each with the product of
its leaves' best layouts, are scored by the exact evaluator (like for like with
random search and annealing). The weight sync and the colocated switch belong
to no leaf: only the exact scoring sees them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time

import numpy as np

import costmodel as cm
from search._src import baselines
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import space as space_lib
from search._src.result import SearchResult

# The leaf (role, or the engine) each stage of an estimate belongs to; stages
# absent here (the weight sync, the colocated switch) belong to no leaf.
_STAGE_LEAF = {"generate": "engine", "reward": "reward", "reference": "actor",
               "old_log_prob": "actor", "actor_update": "actor", "values": "critic",
               "critic_update": "critic"}


def _level(key: tuple) -> int:
  """Coarseness of a pool-size key (:func:`baselines.pool_level`)."""
  return int(baselines.pool_level(np.asarray([key], np.float64).reshape(1, len(key)))[0])


class _Family:
  """One family's DP: its space, leaves (blocks), memo of leaf results and evaluator."""

  def __init__(self, fs: space_lib.FamilySpace, eff: cm.Efficiency, chunk: int, keep: int,
               ev: evaluate.Evaluator | None = None, blocks: baselines._Blocks | None = None):
    self.fs = fs
    self.blocks = blocks if blocks is not None else baselines._Blocks(fs)
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
    out = [(_level(key), k, key) for k, (_, _, _, first) in enumerate(self.leaves)
           for key in first]
    return sorted(out, key=lambda t: (-t[0], t[1], t[2]))

  def first_level(self) -> int:
    """The finest level at which the coarsest complete pool combination is known."""
    pools = np.asarray(self.blocks.pools, np.int64).reshape(len(self.blocks.pools), -1)
    cols = sorted({d for _, _, deps, _ in self.leaves for d in deps})
    if not len(pools) or not cols:
      return 64
    return int(baselines.pool_level(pools[:, cols]).max())

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
    mine = [j for j, s in enumerate(names)
            if self.fs.block_of(_STAGE_LEAF.get(s, "-")) == name]
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


def _check(budget_s, keep, combos, top_k) -> None:
  if budget_s is not None and (not isinstance(budget_s, (int, float)) or isinstance(
      budget_s, bool) or not budget_s > 0 or math.isnan(budget_s)):
    raise ValueError(f"cut_dp: budget_s={budget_s!r} must be None or a number > 0")
  for name, v in (("keep", keep), ("combos", combos), ("top_k", top_k)):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
      raise ValueError(f"cut_dp: {name}={v!r} must be an integer >= 1")


def cut_dp(job: cm.RLJob, cluster: cm.Cluster, budget_s: float | None = None,
           families=None, space: space_lib.SpaceOptions | None = None,
           framework: str = "any", max_staleness: int = 0, partial_rollout: bool = False,
           keep: int = 2, combos: int = 8, top_k: int = 5,
           efficiency: cm.Efficiency | None = None,
           chunk: int = evaluate.DEFAULT_CHUNK) -> SearchResult:
  """Plans ``job`` on ``cluster`` with the dynamic program over stage cuts.

  Deterministic: the same arguments give the same plan.

  Args:
    job: The RL job.
    cluster: The cluster.
    budget_s: Wall-time budget, set-up included (None: every split). Leaf
      evaluations stop once it is spent (after the coarsest level of pool
      sizes, which always runs); the exact scoring of the final candidates
      follows.
    families: Families (cut trees) to plan over; default: every one that
      ``framework`` runs in the allowed modes.
    space: The discrete options of each variable (defaults if None).
    framework: ``any`` or a framework (see :func:`search.optimize`).
    max_staleness: Largest staleness allowed (0: on-policy).
    partial_rollout: Whether partial rollouts may be used.
    keep: Best layouts each leaf keeps per pool size (the final candidates
      are the products of these).
    combos: Best pool combinations per family scored exactly.
    top_k: Plans returned.
    efficiency: Efficiency parameters (defaults if None).
    chunk: Rows per compiled evaluation call.

  Returns:
    A :class:`SearchResult` (``method="cut_dp"``) over the families, its
    plans scored by the exact evaluator.

  Raises:
    ValueError: for a bad ``budget_s``, ``keep``, ``combos`` or ``top_k``,
      an unknown family or one outside the framework and modes.
  """
  t0 = time.perf_counter()
  result_lib.check_arguments("cut_dp", job, cluster)
  _check(budget_s, keep, combos, top_k)
  allowed = fw_lib.families_for(job, framework, max_staleness, partial_rollout)
  fams = tuple(families) if families is not None else allowed
  if not fams:
    raise ValueError(f"cut_dp: families={fams!r} is empty")
  for f in fams:
    if f not in allowed:
      raise ValueError(f"cut_dp: family={f!r} is not a placement of {framework=} with "
                       f"{max_staleness=}, {partial_rollout=} (allowed: {allowed})")
  fw = fw_lib.get(framework)
  eff = efficiency if efficiency is not None else cm.Efficiency()
  runs, skipped = [], {}
  for f in fams:
    why = baselines.why_empty(job, cluster, f, space, framework)
    if why is not None:  # a family that holds no plan is skipped, saying why
      skipped[f] = why
      continue
    # The valid space as the baselines keep it per process (built once).
    _, fs, blocks = baselines._valid_space(job, cluster, f, space, framework)
    runs.append(_Family(fs, eff, chunk, keep, blocks=blocks))
  if not runs:
    return SearchResult(method="cut_dp", wall_time_s=time.perf_counter() - t0,
                        framework=fw.name, skipped=skipped,
                        infeasible_reason="no family holds a plan: " + "; ".join(
                            skipped.values()))
  work = sorted(((lvl, r, k, key) for r, run in enumerate(runs)
                 for lvl, k, key in run.items()), key=lambda t: (-t[0], t[1], t[2], t[3]))
  # Every family gets at least one complete pool combination whatever the budget.
  coarsest = min(run.first_level() for run in runs)
  _score_leaves(runs, work, chunk, budget_s, t0, coarsest)
  return dataclasses.replace(_final(runs, combos, keep, top_k, t0, fw.name), skipped=skipped)


def _score_leaves(runs, work, chunk: int, budget_s=None, t0: float = 0.0,
                  coarsest: int = 0) -> None:
  """Scores the leaves of ``work`` ((level, run, leaf, key), coarse first), one
  run's rows at a time in batches of about ``chunk`` rows; past ``budget_s``
  seconds since ``t0`` it stops once the levels finer than ``coarsest`` begin."""
  pending, rows_in = [], 0
  for i, (lvl, r, k, key) in enumerate(work):
    pending.append((r, k, key, runs[r].leaf_rows(k, key)))
    rows_in += len(pending[-1][3])
    last = i + 1 == len(work) or work[i + 1][1] != r
    if rows_in >= chunk or last:
      _flush(runs[r], pending)
      pending, rows_in = [], 0
      spent = time.perf_counter() - t0
      if budget_s is not None and spent >= budget_s and lvl < coarsest:
        break
  if pending:
    _flush(runs[pending[0][0]], pending)


def family_seeds(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, keep: int = 2,
                 combos: int = 8) -> np.ndarray:
  """The DP's final candidates in one family, for a search to start from.

  The coarsest level of pool sizes only (multiples of the largest powers of
  two, every leaf's layouts scored there), with ``ev`` (an evaluator with
  whole estimates, ``full=True``) shared with the caller: the products of each
  leaf's ``keep`` best layouts on the DP's ``combos`` best pool combinations,
  valid rows only ([N, V]; empty when the family holds no combination).
  """
  if not ev.full:
    raise ValueError("cut_dp.family_seeds: the evaluator needs full=True (stage times)")
  grid = fs.pool_grid()
  # The coarsest level that holds a complete plan: only its pool combinations
  # are built (a 16,384-GPU split has 229,000 of them in all).
  for level in sorted(set(baselines.pool_level(grid).tolist()), reverse=True):
    blocks = baselines._Blocks(fs, min_level=level)
    if len(blocks.pools):
      break
  else:
    return np.zeros((0, len(fs.vars)))
  run = _Family(fs, ev.eff, ev.chunk, keep, ev=ev, blocks=blocks)
  level = run.first_level()
  _score_leaves([run], [(lvl, 0, k, key) for lvl, k, key in run.items() if lvl >= level],
                ev.chunk)
  cand = [run.candidates(p, keep) for p in run.combine(combos)]
  if not cand:
    return np.zeros((0, len(fs.vars)))
  values = np.concatenate(cand, 0)
  return values[fs.valid(values)]


def _flush(run: _Family, pending: list) -> None:
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


def _final(runs: list[_Family], combos: int, keep: int, top_k: int, t0: float,
           framework: str = "any") -> SearchResult:
  """Scores each family's best DP combinations exactly and ranks them together; keeps
  those ``framework``'s exporter accepts."""
  scored, best_by = [], {}
  for run in runs:
    cand = [run.candidates(p, keep) for p in run.combine(combos)]
    if not cand:
      best_by[run.fs.family] = np.inf
      continue
    values = np.concatenate(cand, 0)
    values = values[run.fs.valid(values)]
    s = run.ev.scores(values)
    ranked = result_lib.rank(result_lib.Ranked(values, s.step_time_s, s.feasible, s.excess))
    scored.append((run, ranked))
    best_by[run.fs.family] = (float(ranked.step_time_s[0]) if len(ranked.feasible)
                              and ranked.feasible[0] else np.inf)
  entries = [(float(r.step_time_s[i]), j, i) for j, (_, r) in enumerate(scored)
             for i in range(len(r.feasible)) if r.feasible[i]]
  entries.sort()
  evaluations = sum(run.ev.count for run in runs)
  size = sum(run.blocks.size for run in runs)
  if not entries:
    return SearchResult(method="cut_dp", evaluations=evaluations, space_size=size,
                        wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                        infeasible_reason="the cut DP found no feasible plan in families "
                        f"{', '.join(run.fs.family for run in runs)}")
  plans, fams = [], []
  for _, j, i in entries:
    run, r = scored[j]
    job, cluster = run.fs.job, run.fs.cluster
    if fw_lib.export_error(framework, run.fs.to_plan(r.values[i]), job, cluster) is not None:
      continue
    plans += result_lib.exact_plans(run.ev, r.values[i:i + 1])
    fams.append(run.fs.family)
    if len(plans) == top_k:
      break
  if not plans:
    return SearchResult(method="cut_dp", evaluations=evaluations, space_size=size,
                        wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                        framework=framework, infeasible_reason="the cut DP found no feasible "
                        f"plan that {framework} runs")
  return SearchResult(method="cut_dp", family=fams[0], best_plan=plans[0][0],
                      best_estimate=plans[0][1], top=tuple(plans), top_families=tuple(fams),
                      evaluations=evaluations, space_size=size,
                      wall_time_s=time.perf_counter() - t0, best_by_family_s=best_by,
                      framework=framework,
                      accepted_by=fw_lib.accepting(plans[0][0], runs[0].fs.job,
                                                   runs[0].fs.cluster))
