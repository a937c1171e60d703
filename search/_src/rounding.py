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
move helps, with GPUs moved between two pools as one move.
:func:`search._src.block_sweep.block_sweep` then replaces whole blocks (the pool
sizes, a role's layout, the engines) of the best plans by their best valid
combination.
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


def _moves(fs: space_lib.FamilySpace) -> list[tuple]:
  """The single moves of a plan: ``(j, d)`` a numeric variable ``j`` one
  option up (``d`` = 1) or down (-1), ``(j, 0)`` a categorical to another
  option, ``(a, b, None)`` GPUs moved from pool ``b`` to pool ``a`` (one option
  up and down)."""
  moves = [(j, d) for j, var in enumerate(fs.vars) if len(var.options) > 1
           for d in ((0,) if var.kind == space_lib.CAT else (-1, 1))]
  pools = [fs.index(f"pool.{p}") for p in fs.structure.pools]
  return moves + [(a, b, None) for a, b in itertools.permutations(pools, 2)]


def _step(fs: space_lib.FamilySpace, j: int, values: np.ndarray, d: int) -> np.ndarray:
  """Variable ``j``'s ``values`` moved ``d`` options (held at the ends)."""
  opts = np.asarray(fs.vars[j].options, np.float64)
  return opts[np.clip(np.searchsorted(opts, values) + d, 0, len(opts) - 1)]


def neighbours(fs: space_lib.FamilySpace, values: np.ndarray,
               pairs: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Valid neighbours of each row of ``values`` [n, V].

  Single moves (:func:`_moves`): one variable one option up or down (a
  categorical to any other option), and GPUs moved from one pool to another.
  With ``pairs``, every combination of two single moves on different variables.

  Returns:
    ``(neighbours [m, V], owner [m])``: the row each neighbour comes from.
  """
  n, v = values.shape
  moves = []  # list of (var index, new values [n]) single-variable moves
  transfers = []
  for move in _moves(fs):
    if len(move) == 3:
      a, b, _ = move
      transfers.append(((a, _step(fs, a, values[:, a], 1)),
                        (b, _step(fs, b, values[:, b], -1))))
    elif move[1]:
      moves.append((move[0], _step(fs, move[0], values[:, move[0]], move[1])))
    else:
      moves += [(move[0], np.full(n, o)) for o in fs.vars[move[0]].options]
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


def random_neighbours(fs: space_lib.FamilySpace, blocks, cur: np.ndarray,
                      rng: np.random.Generator, tries: int = 8):
  """One random valid neighbour of each row of ``cur`` [n, V] (annealing's
  proposals): a move of :func:`_moves` is drawn per row and kept where it
  gives a valid plan, found by label in the valid space ``blocks``
  (:meth:`~search._src.valid_space.Blocks.find`), up to ``tries`` draws a row.
  Checking one candidate per row by label, where :func:`neighbours` builds
  every neighbour and checks each by the rule table, takes an iteration of
  1,024 chains from about 100 ms to a few.

  Returns:
    ``(proposals [n, V], their labels, has [n])``: rows without a valid draw
    keep their plan (and its labels) and ``has`` False.
  """
  n = len(cur)
  moves = _moves(fs)
  prop, has = cur.copy(), np.zeros(n, bool)
  labels = np.zeros((n, len(blocks.pool_idx) + len(blocks.other)), np.uint32)
  todo = np.arange(n)
  for _ in range(tries if moves else 0):
    pick = rng.integers(len(moves), size=len(todo))
    cand = cur[todo].copy()
    for m in np.unique(pick):
      rows, move = np.flatnonzero(pick == m), moves[m]
      j = move[0]
      if len(move) == 3:
        b = move[1]
        cand[rows, j] = _step(fs, j, cand[rows, j], 1)
        cand[rows, b] = _step(fs, b, cand[rows, b], -1)
      elif move[1]:
        cand[rows, j] = _step(fs, j, cand[rows, j], move[1])
      else:  # a categorical: another of its options
        opts = np.asarray(fs.vars[j].options, np.float64)
        at = np.searchsorted(opts, cand[rows, j]) + rng.integers(1, len(opts), len(rows))
        cand[rows, j] = opts[at % len(opts)]
    lab, ok = blocks.find(cand)
    ok &= (cand != cur[todo]).any(1)
    prop[todo[ok]], labels[todo[ok]], has[todo[ok]] = cand[ok], lab[ok], True
    todo = todo[~ok]
    if not len(todo):
      break
  labels[todo] = blocks.find(cur[todo])[0]  # the rows that stay keep their own labels
  return prop, labels, has
