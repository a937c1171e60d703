"""Block-coordinate descent over the discrete plans of one family.

After the local search (:mod:`search._src.rounding`), :func:`block_sweep`
replaces whole blocks of variables of the best plans (the pool sizes, a role's
layout, the engines: :attr:`FamilySpace.blocks`) by their best valid
combination, block after block, scoring each block's grid in one batch.
"""

from __future__ import annotations

import numpy as np

from search._src import evaluate
from search._src import result as result_lib
from search._src import space as space_lib
from search._src.result import Ranked


# Rows of a block's grid scored per plan at most (a uniform sample beyond).
MAX_BLOCK_ROWS = 1 << 17
# Fastest over-memory rows of a role's block retried at every engine memory fraction.
COUPLED_TRIES = 64


def _coupled(fs: space_lib.FamilySpace, block: str) -> int | None:
  """Column of the engines' memory fraction when ``block`` is a role that
  shares the rollout pool with the engines (its memory competes with their KV
  cache), else None."""
  name = "engine.memory_fraction"
  roles = fs.structure.roles
  if (block not in roles or name not in fs.names or len(fs.var(name).options) < 2
      or fs.structure.placement.pool_of(block) != fs.rollout_pool):
    return None
  return fs.index(name)


def _new_splits(values: np.ndarray, pools: list[int], seen: set, n: int) -> list[int]:
  """Indices of the first row of up to ``n`` pool splits of ``values`` not in
  ``seen`` (which gains them)."""
  out = []
  for i, row in enumerate(values):
    key = tuple(row[pools])
    if key not in seen:
      seen.add(key)
      out.append(i)
    if len(out) == n:
      break
  return out


def block_sweep(ev: evaluate.Evaluator, ranked: Ranked, plans: int = 2, rounds: int = 2,
                rng: np.random.Generator | None = None, extra: Ranked | None = None
                ) -> Ranked:
  """Block-coordinate descent from the best ``plans`` distinct rows of ``ranked``.

  For each plan, each block of variables (:attr:`FamilySpace.blocks`: the
  pool sizes, a role's layout, the engines) is replaced by every option
  combination of that block that gives a valid plan with the other variables
  held (the pools: every combination that fits the cluster; the grid of a
  block beyond :data:`MAX_BLOCK_ROWS` rows is sampled uniformly), all scored
  in one batch; the best replaces the plan. ``extra`` (another search's
  ranked plans) adds the best plans of up to ``plans`` of its pool splits
  not among those picked. A role that shares its pool with the engines competes with their KV
  cache, so its :data:`COUPLED_TRIES` fastest layouts that do not fit are
  retried at every engine memory fraction. Rounds repeat over the blocks
  until none improves (at most ``rounds``). It reaches layouts that differ
  from the plan in several of a role's degrees at once (a role's TP, PP and
  recompute together), which single and paired moves (:func:`local_search`)
  cannot.

  Returns:
    ``ranked`` with every row scored here, ranked: the best
    :data:`~search._src.result.KEEP` distinct rows.
  """
  fs = ev.fs
  rng = rng if rng is not None else np.random.default_rng(0)
  if plans < 1 or rounds < 1:
    raise ValueError(f"block_sweep: {plans=} and {rounds=} must be >= 1")
  grids = {}
  for name, idx in fs.blocks:
    sizes = [len(fs.vars[j].options) for j in idx]
    if name == "pools":
      if len(idx) and np.prod(sizes, dtype=float) > 1:
        grids[name] = (list(idx), fs.pool_grid(MAX_BLOCK_ROWS, rng))
      continue
    if np.prod(sizes, dtype=float) <= 1:
      continue
    grids[name] = (list(idx), fs.option_grid(idx, MAX_BLOCK_ROWS, rng))
  coupled = {block: _coupled(fs, block) for block in grids}
  visited = [ranked]
  ranked = result_lib.rank(ranked)
  pools = list(dict(fs.blocks)["pools"])
  # The best plan, then the best of each other pool split, then the next best.
  seen: set = set()
  picked = _new_splits(ranked.values, pools, seen, plans)
  picked += [i for i in range(len(ranked.values)) if i not in picked][:plans - len(picked)]
  start = ranked.values[sorted(picked)]
  if extra is not None and len(extra.values):
    # Another search's best pool splits (the cut DP's), those not picked already.
    extra = result_lib.rank(extra)
    start = np.concatenate([start, extra.values[_new_splits(extra.values, pools, seen, plans)]])
  # The valid rows of a block's grid in a valid plan
  # (:meth:`FamilySpace.valid_replacing`); a role's or the engine's mask depends
  # only on the plan's pool sizes, so it is computed once per pool split.
  masks: dict = {}

  def valid_grid(block, idx, grid, cur, cur_valid):
    cand = np.tile(cur, (len(grid), 1))
    cand[:, idx] = grid
    if not cur_valid:
      return cand[fs.valid(cand)]
    if block == "pools":
      return cand[fs.valid_replacing(cur, idx, grid)]
    key = (block, cur[pools].tobytes())
    if key not in masks:
      masks[key] = fs.valid_replacing(cur, idx, grid)
    return cand[masks[key]]

  def scored(sets):
    """Scores of several row sets, in one call, split back per set."""
    sizes = [len(c) for c in sets]
    if not sum(sizes):
      return [None] * len(sets)
    s = ev.scores(np.concatenate(sets, 0))
    parts = [np.split(a, np.cumsum(sizes)[:-1]) for a in s]
    return [type(s)(*(p[j] for p in parts)) for j in range(len(sets))]

  def coupled_tries(col, cand, s):
    """Rows of ``cand`` whose role does not fit beside the engines, the
    fastest :data:`COUPLED_TRIES`, at every engine memory fraction."""
    over = np.flatnonzero(~s.feasible & np.isfinite(s.step_time_s))
    fastest = over[np.argsort(s.step_time_s[over], kind="stable")[:COUPLED_TRIES]]
    opts = fs.vars[col].options
    more = np.repeat(cand[fastest], len(opts), 0)
    more[:, col] = np.tile(opts, len(fastest))
    return more[fs.valid(more, blocks=("engine",))]  # the rest is valid

  # The starts move in step, block by block, each block's sweeps of every start
  # scored in one call. A block's sweep depends only on the plan's other
  # variables: a sweep met again (a later round after the block alone changed,
  # or another start that reached the same plan) has the same best row, which
  # is reused unscored.
  swept: dict = {}
  curs = [np.asarray(row, np.float64) for row in start]
  if not curs:
    return result_lib.rank(*visited, keep=result_lib.KEEP)
  s = ev.scores(np.stack(curs))
  cur_o = [float(o) for o in result_lib.objective(s.step_time_s, s.feasible, s.excess)]
  cur_valid = [bool(v) for v in fs.valid(np.stack(curs))]
  active = list(range(len(curs)))
  for _ in range(rounds):
    improved = set()
    for block, (idx, grid) in grids.items():
      keys, todo = {}, {}
      for i in active:
        keys[i] = key = (block, cur_valid[i], np.delete(curs[i], idx).tobytes())
        if key not in swept and key not in todo:
          todo[key] = valid_grid(block, idx, grid, curs[i], cur_valid[i])
      for key in [k for k, c in todo.items() if not len(c)]:
        swept[key] = (None, np.inf)
        del todo[key]
      cands = list(todo.values())
      scores = scored(cands)
      col = coupled[block]
      if col is not None and todo:
        more = [coupled_tries(col, c, sc) for c, sc in zip(cands, scores, strict=True)]
        for j, s2 in enumerate(scored(more)):
          if s2 is not None and len(more[j]):
            cands[j] = np.concatenate([cands[j], more[j]], 0)
            scores[j] = type(s2)(*(np.concatenate([a, b])
                                   for a, b in zip(scores[j], s2, strict=True)))
      for key, cand, sc in zip(todo, cands, scores, strict=True):
        visited.append(Ranked(cand, sc.step_time_s, sc.feasible, sc.excess))
        o = result_lib.objective(sc.step_time_s, sc.feasible, sc.excess)
        k = int(np.argmin(o))
        swept[key] = (cand[k], float(o[k]))
      for i in active:
        best, best_o = swept[keys[i]]
        if best_o < cur_o[i] * (1 - 1e-6):
          curs[i], cur_o[i], cur_valid[i] = best, best_o, True
          improved.add(i)
    active = [i for i in active if i in improved]
    if not active:
      break
  return result_lib.rank(*visited, keep=result_lib.KEEP)
