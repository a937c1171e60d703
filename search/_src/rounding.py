"""From relaxed solutions to feasible discrete plans.

Rounding (numpy, vectorised over starts):

1. each relaxed value is bracketed by its neighbouring options (powers of two
   for degrees and concurrency, whole nodes or node divisors for pools, the
   memory-fraction grid);
2. candidates per start: the nearest option of every variable, all-floor,
   all-ceil and ``corners`` random corners of the bracket (each variable rounds
   up with probability equal to its position inside the bracket);
3. categorical values: the start's own, plus for the nearest point every
   combination of one role's categorical values (the full product where it is
   small);
4. :meth:`FamilySpace.repair` moves each candidate towards validity (ZeRO-3
   drops TP/PP, degrees that do not divide the pool are halved), then
   :meth:`FamilySpace.valid` drops what still does not run.

All candidates are then scored exactly in one batched call and the best few
seed a discrete local search (:func:`local_search`): best-improvement moves of
one variable by one option (one degree doubled or halved, a pool shifted by
one node, one categorical changed), then of pairs of variables when no single
move helps, with GPUs moved between two pools as one move. :func:`block_sweep`
then replaces whole blocks (the pool sizes, a role's layout, the engines) of
the best plans by their best valid combination.
"""

from __future__ import annotations

import itertools

import numpy as np

from search._src import evaluate
from search._src import result as result_lib
from search._src import space as space_lib
from search._src.result import Ranked


def _unique_rows(values: np.ndarray) -> np.ndarray:
  if values.shape[0] == 0:
    return values
  return result_lib.distinct_rows(values)[0]


def _cat_groups(fs: space_lib.FamilySpace) -> list[list[int]]:
  """Categorical variables grouped by role (engine last)."""
  groups: dict[str, list[int]] = {}
  for j, var in enumerate(fs.vars):
    if var.kind == space_lib.CAT and len(var.options) > 1:
      groups.setdefault(var.name.split(".")[0], []).append(j)
  return list(groups.values())


def _cat_variants(fs: space_lib.FamilySpace, base: np.ndarray,
                  max_product: int = 256) -> np.ndarray:
  """Copies of ``base`` [n, V] with categorical values enumerated."""
  groups = _cat_groups(fs)
  all_idx = [j for g in groups for j in g]
  combos = []
  if all_idx and np.prod([len(fs.vars[j].options) for j in all_idx]) <= max_product:
    combos.append((all_idx, list(itertools.product(*[fs.vars[j].options for j in all_idx]))))
  else:
    for g in groups:
      combos.append((g, list(itertools.product(*[fs.vars[j].options for j in g]))))
  out = [base]
  for idx, values in combos:
    for combo in values:
      v = base.copy()
      v[:, idx] = combo
      out.append(v)
  return np.concatenate(out, 0)


def candidates(fs: space_lib.FamilySpace, relaxed_values: np.ndarray,
               rng: np.random.Generator, corners: int = 32) -> np.ndarray:
  """Valid discrete value vectors around each relaxed solution.

  Args:
    fs: The family space.
    relaxed_values: [starts, V] continuous values (categoricals exact).
    rng: Random generator for the corners.
    corners: Random bracket corners per start.

  Returns:
    [n, V] unique valid value vectors.
  """
  x = np.asarray(relaxed_values, np.float64)
  lo, hi, w = fs.bracket(x)
  nearest = fs.nearest(x)
  parts = [nearest, lo, hi]
  if corners:
    u = rng.uniform(size=(corners,) + x.shape)
    parts.append(np.where(u < w[None], hi[None], lo[None]).reshape(-1, x.shape[-1]))
  parts.append(_cat_variants(fs, nearest))
  cand = np.concatenate(parts, 0)
  cand = _fill_pools(fs, cand)
  cand = fs.repair(cand)
  cand = _unique_rows(cand)
  return cand[fs.valid(cand)]


def _fill_pools(fs: space_lib.FamilySpace, values: np.ndarray) -> np.ndarray:
  """Adds, for each row, the variant whose last pool takes every GPU the
  others leave (when that count is a valid pool size)."""
  names = [f"pool.{p}" for p in fs.structure.pools]
  if len(names) < 2:
    return values
  idx = [fs.index(n) for n in names]
  rest = fs.cluster.n_gpus - values[:, idx[:-1]].sum(-1)
  opts = fs.var(names[-1]).options
  ok = np.isin(rest, opts)
  filled = values[ok].copy()
  filled[:, idx[-1]] = rest[ok]
  return np.concatenate([values, filled], 0)


def neighbours(fs: space_lib.FamilySpace, values: np.ndarray,
               pairs: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Valid neighbours of each row of ``values`` [n, V].

  Single moves: one variable one option up or down (a categorical to any other
  option), and GPUs moved from one pool to another. With ``pairs``, every
  combination of two single moves on different variables.

  Returns:
    ``(neighbours [m, V], owner [m])``: the row each neighbour comes from.
  """
  n, v = values.shape
  moves = []  # list of (var index, new values [n]) single-variable moves
  for j, var in enumerate(fs.vars):
    opts = var.options
    if len(opts) < 2:
      continue
    k = np.searchsorted(opts, values[:, j])
    if var.kind == space_lib.CAT:
      for o in opts:
        moves.append((j, np.full(n, o)))
    else:
      moves.append((j, opts[np.maximum(k - 1, 0)]))
      moves.append((j, opts[np.minimum(k + 1, len(opts) - 1)]))
  pool_idx = [fs.index(f"pool.{p}") for p in fs.structure.pools]
  transfers = []
  if len(pool_idx) > 1:
    for a, b in itertools.permutations(pool_idx, 2):
      oa, ob = fs.vars[a].options, fs.vars[b].options
      ka, kb = np.searchsorted(oa, values[:, a]), np.searchsorted(ob, values[:, b])
      transfers.append(((a, oa[np.minimum(ka + 1, len(oa) - 1)]),
                        (b, ob[np.maximum(kb - 1, 0)])))
  out, owner = [], []
  rows = np.arange(n)
  for j, new in moves:
    nb = values.copy()
    nb[:, j] = new
    out.append(nb)
    owner.append(rows)
  for (a, na), (b, nb_) in transfers:
    nb = values.copy()
    nb[:, a], nb[:, b] = na, nb_
    out.append(nb)
    owner.append(rows)
  if pairs:
    for (j1, n1), (j2, n2) in itertools.combinations(moves, 2):
      if j1 == j2:
        continue
      nb = values.copy()
      nb[:, j1], nb[:, j2] = n1, n2
      out.append(nb)
      owner.append(rows)
  if not out:
    return np.zeros((0, v)), np.zeros((0,), int)
  nbs = np.concatenate(out, 0)
  own = np.concatenate(owner, 0)
  changed = np.any(nbs != values[own], axis=-1)
  ok = changed & fs.valid(nbs)
  return nbs[ok], own[ok]


def score(ev: evaluate.Evaluator, values: np.ndarray) -> Ranked:
  """Scores rows exactly and ranks them (:func:`search._src.result.rank`,
  duplicates dropped)."""
  if values.shape[0] == 0:
    z = np.zeros((0,))
    return Ranked(values, z, z.astype(bool), z)
  s = ev.scores(values)
  return result_lib.rank(Ranked(values, s.step_time_s, s.feasible, s.excess))


def local_search(ev: evaluate.Evaluator, seeds: Ranked, max_iters: int = 50) -> Ranked:
  """Best-improvement discrete descent of the ranking objective
  (:func:`search._src.result.objective`) from each seed.

  Each iteration scores every active point's single-move neighbours in one
  batch; points that cannot improve by one move try pairs of moves; points
  that cannot improve by either stop. Infeasible seeds descend on their memory
  excess until they fit. Returns every point visited, ranked.
  """
  fs = ev.fs
  cur_v = seeds.values
  cur_o = seeds.objective
  visited = [seeds]
  use_pairs = np.zeros(len(cur_v), bool)
  for _ in range(max_iters):
    if len(cur_v) == 0:
      break
    nb_s, own_s = neighbours(fs, cur_v[~use_pairs])
    own_s = np.flatnonzero(~use_pairs)[own_s]
    nb_p, own_p = neighbours(fs, cur_v[use_pairs], pairs=True)
    own_p = np.flatnonzero(use_pairs)[own_p]
    nbs = np.concatenate([nb_s, nb_p], 0)
    own = np.concatenate([own_s, own_p], 0)
    if len(nbs) == 0:
      break
    s = ev.scores(nbs)
    visited.append(Ranked(nbs, s.step_time_s, s.feasible, s.excess))
    o = result_lib.objective(s.step_time_s, s.feasible, s.excess)
    best_o = np.full(len(cur_v), np.inf)
    np.minimum.at(best_o, own, o)
    improved = best_o < cur_o * (1 - 1e-6)
    new_v = cur_v.copy()
    for i in np.flatnonzero(improved):
      new_v[i] = nbs[np.flatnonzero((own == i) & (o == best_o[i]))[0]]
    # Improved points go back to single moves; stuck single-move points try
    # pairs; stuck pair points stop.
    keep = improved | ~use_pairs
    next_pairs = ~improved & ~use_pairs
    cur_v = new_v[keep]
    cur_o = np.where(improved, best_o, cur_o)[keep]
    use_pairs = next_pairs[keep]
    if len(cur_v):
      first = result_lib.first_copies(cur_v)
      cur_v, cur_o, use_pairs = cur_v[first], cur_o[first], use_pairs[first]
  return result_lib.rank(*visited)


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
