"""Baselines for the layout search: exhaustive enumeration, random search and
simulated annealing, all on the exact model over a family's discrete space.

Exhaustive enumeration walks the valid space block by block: for every
combination of pool sizes, each block of variables (one role's layout, the
engine) is enumerated and filtered on its own, and the product of the valid
blocks is decoded chunk by chunk (mixed radix), so memory stays bounded by
the chunk size whatever the size of the space. Each chunk is scored by one
jitted, vmapped call; a running top-k is kept.
"""

from __future__ import annotations

import time

import numpy as np

import costmodel as cm
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import rounding
from search._src import space as space_lib
from search._src.result import SearchResult
from search._src.space_options import _LAYOUT_ROLES


def pool_level(sizes: np.ndarray) -> np.ndarray:
  """Coarseness of each row of pool sizes ([N, P]): the fewest trailing zero
  bits + 1 among its sizes (a row of multiples of 512 has level 10 or more)."""
  sizes = np.asarray(sizes, np.int64).reshape(len(sizes), -1)
  if not sizes.shape[1]:
    return np.full(len(sizes), 64)
  low = sizes & -sizes
  bits = np.where(low > 0, np.floor(np.log2(np.maximum(low, 1))) + 1, 0)
  return bits.min(-1).astype(np.int64)


class _Blocks:
  """The valid space of a family as pool combinations x valid block rows.

  A block's validity depends only on the block and the sizes of the pools
  its roles (or the engines) sit on (:attr:`FamilySpace.blocks`), so each
  block's valid rows are found once per distinct size of those pools, all
  sizes in a few vectorised calls, and shared by every pool combination.
  ``min_level`` keeps only the pool combinations of at least that coarseness
  (:func:`pool_level`).

  Rows may come with labels (:attr:`label_of`): one per pool, the bits of its
  size, then one per block, the index of the row's valid block row among every
  valid row of that block over all pool sizes; two rows with an equal label are
  equal on the variables it covers (what :func:`costmodel.estimate_rows` groups
  stage inputs by).
  """

  def __init__(self, fs: space_lib.FamilySpace, min_level: int = 0):
    self.fs = fs
    blocks = fs.blocks
    self.pool_idx = dict(blocks)["pools"]
    self.other = [(name, idx) for name, idx in blocks if name != "pools"]
    combos = fs.pool_grid()
    if min_level:
      combos = combos[pool_level(combos) >= min_level]
    combos = combos[fs.valid(self._full(combos), blocks=("pools",))] if len(combos) else combos
    # Each block's valid rows per distinct size of the pools it reads: the
    # combinations map onto those keys by index (np.unique), not tuple by tuple.
    tables, inverse = [], []
    for name, idx in self.other:
      deps = self.depends_on(name)
      keys, inv = result_lib.distinct_rows(combos[:, deps].reshape(len(combos), len(deps)))
      keys = [tuple(k) for k in keys]
      table = self.block_rows(name, idx, deps, keys)
      tables.append([table[k] for k in keys])
      inverse.append(inv.reshape(-1))
    counts = np.ones(len(combos))
    for table, inv in zip(tables, inverse, strict=True):
      counts = counts * np.asarray([len(r) for r in table], np.float64)[inv]
    keep = np.flatnonzero(counts > 0)
    self.pools = combos[keep]
    #: Per block, the index of each kept pool combination's key (its rows: ``rows``).
    self.key_index = [inv[keep] for inv in inverse]
    self.rows = [[table[inv[p]] for table, inv in zip(tables, inverse, strict=True)]
                 for p in keep]
    self.counts = counts[keep]
    # Where each key's valid rows start among all of the block's, for labels.
    self._offsets = [np.concatenate([[0], np.cumsum([len(r) for r in table])])[:-1]
                     .astype(np.int64) for table in tables]

  def _full(self, combos: np.ndarray) -> np.ndarray:
    """Value vectors of pool combinations (every other variable at its first option)."""
    full = np.tile(np.asarray([v.options[0] for v in self.fs.vars], np.float64),
                   (len(combos), 1))
    full[:, list(self.pool_idx)] = combos
    return full

  def depends_on(self, block: str) -> list[int]:
    """Positions (in the pool combination) of the pools ``block``'s validity reads."""
    fs = self.fs
    pools = {fs.structure.placement.pool_of(r) for r in fs.structure.roles
             if r in _LAYOUT_ROLES and fs.block_of(r) == block}
    if fs.block_of("engine") == block:
      pools.add(fs.rollout_pool)
    names = [fs.vars[j].name for j in self.pool_idx]
    return [k for k, n in enumerate(names) if n.removeprefix("pool.") in pools]

  def block_rows(self, block: str, idx, deps: list[int], keys: list[tuple],
                 max_rows: int = 1 << 20) -> dict[tuple, np.ndarray]:
    """Valid rows of ``block`` (its variables ``idx``) for each ``keys`` entry
    (sizes of the pools ``deps``), checked in chunks of ``max_rows`` rows."""
    fs = self.fs
    grid = fs.option_grid(idx)
    base = self._full(np.zeros((1, len(self.pool_idx))))[0]
    base[list(idx)] = 0.0
    out = {}
    per = max(1, max_rows // max(len(grid), 1))
    cols = [self.pool_idx[k] for k in deps]
    for start in range(0, len(keys), per):
      part = np.asarray(keys[start:start + per], np.float64).reshape(-1, len(deps))
      full = np.tile(base, (len(part) * len(grid), 1))
      full[:, list(idx)] = np.tile(grid, (len(part), 1))
      full[:, cols] = np.repeat(part, len(grid), 0)
      ok = fs.valid(full, blocks=(block,)).reshape(len(part), len(grid))
      for key, m in zip(keys[start:start + per], ok, strict=True):
        out[key] = grid[m]
    return out

  @property
  def size(self) -> int:
    return int(self.counts.sum())

  @property
  def label_of(self) -> tuple[int, ...]:
    """For each variable, the label that identifies its value (variables in no
    block, which keep one value, take the first pool's)."""
    out = [0] * len(self.fs.vars)
    for k, j in enumerate(self.pool_idx):
      out[j] = k
    for i, (_, idx) in enumerate(self.other):
      for j in idx:
        out[j] = len(self.pool_idx) + i
    return tuple(out)

  def _labels(self, n: int) -> np.ndarray:
    return np.empty((n, len(self.pool_idx) + len(self.other)), np.uint32)

  def _pool_labels(self, p) -> np.ndarray:
    """The pools' labels of pool combination(s) ``p``: their sizes' float32 bits."""
    return self.pools[p].astype(np.float32).view(np.uint32)

  def _label(self, i: int, p, digit) -> np.ndarray:
    """The label of block ``i`` in rows taking its row ``digit`` under pool
    combination(s) ``p``."""
    return self._offsets[i][self.key_index[i][p]] + digit

  def decode(self, p: int, start: int, stop: int, labels: bool = False):
    """Rows ``start:stop`` of pool combination ``p``'s product (and, with
    ``labels``, their labels [N, pools + blocks])."""
    rows = self.rows[p]
    k = np.arange(start, stop, dtype=np.int64)
    out = np.zeros((len(k), len(self.fs.vars)))
    lab = self._labels(len(k))
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    out[:, list(self.pool_idx)] = self.pools[p]
    for i in reversed(range(len(self.other))):
      r = rows[i]
      k, digit = np.divmod(k, len(r))
      out[:, list(self.other[i][1])] = r[digit]
      lab[:, m + i] = self._label(i, p, digit)
    return (out, lab) if labels else out

  def sample(self, rng: np.random.Generator, n: int, labels: bool = False):
    """``n`` plans drawn uniformly from the valid space (and, with ``labels``,
    their labels as :meth:`decode` gives them)."""
    p = rng.choice(len(self.pools), size=n, p=self.counts / self.counts.sum())
    out = np.zeros((n, len(self.fs.vars)))
    lab = self._labels(n)
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    for q in np.unique(p):
      sel = np.flatnonzero(p == q)
      out[np.ix_(sel, list(self.pool_idx))] = self.pools[q]
      for i, ((_, idx), r) in enumerate(zip(self.other, self.rows[q], strict=True)):
        digit = rng.integers(0, len(r), size=len(sel))
        out[np.ix_(sel, list(idx))] = r[digit]
        lab[sel, m + i] = self._label(i, q, digit)
    return (out, lab) if labels else out


class _TopK:
  """Running top-k of scored rows (:func:`search._src.result.ranking`)."""

  def __init__(self, k: int):
    self.k = k
    self.ranked = None

  def add(self, values, scores: evaluate.Scores):
    take = result_lib.ranking(scores.step_time_s, scores.feasible, scores.excess)[:self.k]
    new = result_lib.Ranked(values[take], scores.step_time_s[take], scores.feasible[take],
                            scores.excess[take])
    merged = result_lib.rank(*((self.ranked,) if self.ranked is not None else ()), new)
    self.ranked = result_lib.Ranked(*(a[:self.k] for a in merged))


# Ranked plans kept beyond the top-k, for those the chosen framework's exporter refuses.
_SPARE = 16


class _Run:
  """One baseline run: the clock, the family's valid space in ``framework``'s
  space (the one :func:`search.optimize` searches), its exact evaluator
  (``chunk`` rows per compiled call; ``factored``: as in
  :class:`~search._src.evaluate.Evaluator`) and the running top-k."""

  def __init__(self, job, cluster, family, space, efficiency, chunk: int, top_k: int,
               framework: str = "any", factored: bool = True, labelled: bool = False):
    self.t0 = time.perf_counter()
    self.job, self.cluster, self.framework = job, cluster, framework
    self.fs = _family_space(job, cluster, family, space, framework)
    self.blocks = _Blocks(self.fs)
    self.ev = evaluate.Evaluator(self.fs, efficiency, chunk=chunk, factored=factored,
                                 label_of=self.blocks.label_of if labelled else None)
    self.top = _TopK(top_k + _SPARE)
    self.top_k = top_k

  def elapsed_s(self) -> float:
    return time.perf_counter() - self.t0

  def _runs(self, row: np.ndarray) -> bool:
    plan = self.fs.to_plan(np.asarray(row, np.float64))
    return fw_lib.export_error(self.framework, plan, self.job, self.cluster) is None

  def result(self, method: str, size: int = 0) -> SearchResult:
    """The run's :class:`SearchResult`: its top feasible plans that the framework
    runs, scored exactly, or why none was found (the least-bad plan's violations)."""
    fs, ev, r = self.fs, self.ev, self.top.ranked
    plans = []
    if r is not None and r.feasible.any():
      rows = [i for i in np.flatnonzero(r.feasible) if self._runs(r.values[i])][:self.top_k]
      plans = result_lib.exact_plans(ev, r.values[rows]) if rows else []
    best = plans[0] if plans else (None, None)
    reason = None
    if not plans:
      reason = f"no feasible plan found in family {fs.family!r}"
      if r is not None and r.feasible.any():
        reason += f" that {self.framework} runs"
      elif r is not None and len(r.values):
        est = ev.estimates(r.values[:1])[0]
        reason += "; the least-bad: " + result_lib.least_bad_reason(est)
    accepted = fw_lib.accepting(best[0], self.job, self.cluster) if plans else ()
    return SearchResult(method=method, family=fs.family, best_plan=best[0],
                        best_estimate=best[1], top=tuple(plans),
                        top_families=(fs.family,) * len(plans), evaluations=ev.count,
                        space_size=size, wall_time_s=self.elapsed_s(),
                        infeasible_reason=reason, framework=self.framework,
                        accepted_by=accepted,
                        best_by_family_s={fs.family: float(best[1].step_time_s) if plans
                                          else np.inf})


def _family_space(job, cluster, family, space, framework: str = "any"
                  ) -> space_lib.FamilySpace:
  """``family``'s space as :func:`search.optimize` builds it for ``framework``
  (:meth:`Framework.build`: its rules, node layout, ties and forced settings)."""
  fw = fw_lib.get(framework)
  if family not in space_lib.FAMILIES:
    raise ValueError(f"family={family!r} is not one of {space_lib.FAMILIES}")
  runs = fw_lib.families_for(job, framework, max_staleness=1, partial_rollout=True)
  if cm.placement(family).applies_to(job) and family not in runs:
    raise ValueError(f"family={family!r} is not a placement {framework=} runs for this job "
                     f"(it runs {runs})")
  fs = fw.build(family, job, cluster, space)
  if fs is None:
    raise ValueError(f"family={family!r} cannot hold the job on {cluster.n_gpus} GPUs")
  return fs


def space_size(job: cm.RLJob, cluster: cm.Cluster, family: str,
               space: space_lib.SpaceOptions | None = None, framework: str = "any") -> int:
  """Number of valid discrete plans of ``family`` in ``framework``'s space (what
  enumeration scores)."""
  return _Blocks(_family_space(job, cluster, family, space, framework)).size


def enumerate_plans(job: cm.RLJob, cluster: cm.Cluster, family: str,
                    space: space_lib.SpaceOptions | None = None, chunk_size: int = 65536,
                    top_k: int = 5, efficiency: cm.Efficiency | None = None,
                    max_plans: int | None = None, framework: str = "any") -> SearchResult:
  """Scores every valid discrete plan of ``family`` exactly; keeps the top-k.

  Args:
    job: The RL job.
    cluster: The cluster.
    family: The placement family.
    space: Discrete options (defaults if None; see ``SpaceOptions.compact``
      for a space small enough to enumerate).
    chunk_size: Plans per compiled call (memory is bounded by it).
    top_k: Plans to keep.
    efficiency: Efficiency parameters.
    max_plans: Refuse spaces with more valid plans than this.
    framework: ``any`` or a framework: the space :func:`search.optimize` searches
      for it (its rules, node layout, ties and forced settings); the plans kept
      are those its exporter accepts.

  Raises:
    ValueError: when the space holds more than ``max_plans`` plans, the family
      cannot hold the job or is not one ``framework`` runs, or for an unknown
      framework.
  """
  run = _Run(job, cluster, family, space, efficiency, chunk_size, top_k, framework,
             labelled=True)
  blocks, ev, top = run.blocks, run.ev, run.top
  size = blocks.size
  if max_plans is not None and size > max_plans:
    raise ValueError(f"enumerate_plans: family {family!r} has {size:,} valid plans, more "
                     f"than max_plans={max_plans:,}")
  buf, n_buf = [], 0
  for p, count in enumerate(blocks.counts.astype(np.int64)):
    for start in range(0, int(count), chunk_size):
      buf.append(blocks.decode(p, start, min(start + chunk_size, int(count)), labels=True))
      n_buf += len(buf[-1][0])
      while n_buf >= chunk_size:
        rows, labels = (np.concatenate(a, 0) for a in zip(*buf))
        top.add(rows[:chunk_size], ev.scores(rows[:chunk_size], labels=labels[:chunk_size]))
        buf, n_buf = [(rows[chunk_size:], labels[chunk_size:])], len(rows) - chunk_size
  if n_buf:
    rows, labels = (np.concatenate(a, 0) for a in zip(*buf))
    top.add(rows, ev.scores(rows, labels=labels))
  return run.result("enumerate", size)


def random_search(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                  seed: int = 0, space: space_lib.SpaceOptions | None = None,
                  batch: int = 4096, top_k: int = 5,
                  efficiency: cm.Efficiency | None = None,
                  max_evaluations: int | None = None, framework: str = "any"
                  ) -> SearchResult:
  """Uniform samples of the valid space scored exactly until ``budget_s``
  seconds have passed (at least one batch) or ``max_evaluations`` plans are
  scored, whichever comes first; ``framework`` as in :func:`enumerate_plans`.

  Uniform samples share few stage inputs, so every stage is costed on every row
  (:class:`~search._src.evaluate.Evaluator` with ``factored=False``): on the
  large jobs' seven families (``benchmarks.search_large``; 4,096-row batches,
  2 cores, 2026-12-05) it scored 0.6-1.7 times as many plans a second as
  costing each distinct input once (faster on five), and it is the scorer the
  baselines were measured with before."""
  run = _Run(job, cluster, family, space, efficiency, batch, top_k, framework,
             factored=False)
  rng = np.random.default_rng(seed)
  left = max_evaluations if max_evaluations is not None else np.inf
  while left > 0:
    rows = run.blocks.sample(rng, int(min(batch, left)))
    run.top.add(rows, run.ev.scores(rows))
    left -= len(rows)
    if run.elapsed_s() >= budget_s:
      break
  return run.result("random")


def simulated_annealing(job: cm.RLJob, cluster: cm.Cluster, family: str, budget_s: float,
                        seed: int = 0, space: space_lib.SpaceOptions | None = None,
                        chains: int = 1024, t_start: float = 0.1, t_end: float = 0.002,
                        top_k: int = 5, efficiency: cm.Efficiency | None = None,
                        max_evaluations: int | None = None, framework: str = "any"
                        ) -> SearchResult:
  """Batched simulated annealing on the exact model until ``budget_s`` (or
  ``max_evaluations`` scored plans), in ``framework``'s space (as in
  :func:`enumerate_plans`).

  ``chains`` independent chains start from uniform samples; each iteration
  proposes one random neighbour per chain (one variable moved by one option,
  or GPUs moved between pools) and accepts it with probability
  ``min(1, exp(-(log t_new - log t_old) / T))``; ``T`` falls geometrically
  from ``t_start`` to ``t_end`` over the time budget. The chains' proposals
  share few stage inputs, so they are scored as :func:`random_search`'s.
  """
  run = _Run(job, cluster, family, space, efficiency, chains, top_k, framework,
             factored=False)
  fs, ev, top = run.fs, run.ev, run.top
  rng = np.random.default_rng(seed)
  cur = run.blocks.sample(rng, chains)
  s = ev.scores(cur)
  top.add(cur, s)
  cur_o = np.log(result_lib.objective(s.step_time_s, s.feasible, s.excess))
  limit = max_evaluations if max_evaluations is not None else np.inf
  while run.elapsed_s() < budget_s and ev.count + chains <= limit:
    frac = min(run.elapsed_s() / max(budget_s, 1e-9), 1.0)
    if max_evaluations is not None:
      frac = max(frac, min(ev.count / max(limit, 1), 1.0))
    temp = t_start * (t_end / t_start) ** frac
    nbs, own = rounding.neighbours(fs, cur)
    if len(nbs) == 0:
      break
    # One uniformly chosen neighbour per chain (chains without one stay).
    keys = rng.uniform(size=len(own))
    order = np.lexsort((keys, own))
    first = order[np.unique(own[order], return_index=True)[1]]
    prop = cur.copy()
    has = np.zeros(chains, bool)
    prop[own[first]] = nbs[first]
    has[own[first]] = True
    s = ev.scores(prop)
    top.add(prop, s)
    new_o = np.log(result_lib.objective(s.step_time_s, s.feasible, s.excess))
    accept = has & (rng.uniform(size=chains) < np.exp(np.minimum(-(new_o - cur_o) / temp, 0.0)))
    cur[accept] = prop[accept]
    cur_o[accept] = new_o[accept]
  return run.result("annealing")
