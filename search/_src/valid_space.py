"""The valid space of a family as a product: pool combinations x each block's
valid rows, enumerated, sampled and labelled (the baselines' and the cut DP's
view of it)."""

from __future__ import annotations

import numpy as np

from search._src import result as result_lib
from search._src import space as space_lib
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


def _columns(idx) -> slice | list[int]:
  """``idx`` as a slice where it is a run of consecutive columns (a strided
  copy, about 3x faster than a list's scatter on 65,536 rows), else a list."""
  idx = [int(j) for j in idx]
  if idx and idx == list(range(idx[0], idx[0] + len(idx))):
    return slice(idx[0], idx[0] + len(idx))
  return idx


class Blocks:
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
    self._totals = [sum(len(r) for r in table) for table in tables]

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

  def total_rows(self, i: int) -> int:
    """Valid rows of block ``i`` (of :attr:`other`) over every pool size: its
    labels lie in ``[0, total_rows(i))``."""
    return int(self._totals[i])

  def label_rows(self, i: int) -> np.ndarray:
    """One value vector per label of block ``i`` (of :attr:`other`), in label
    order: the block's valid row under a pool combination of its key, every
    other block at its first valid row there. Keys no kept combination takes
    (their labels mark no plan) repeat the first row that has one."""
    counts = np.diff(np.append(self._offsets[i], self.total_rows(i)))
    keys, first = np.unique(self.key_index[i], return_index=True)
    out = np.zeros((int(counts.sum()), len(self.fs.vars)))
    idx = list(self.other[i][1])
    filled = np.zeros(len(out), bool)
    for k, p in zip(keys, first, strict=True):
      at = slice(self._offsets[i][k], self._offsets[i][k] + counts[k])
      out[at] = self.decode(int(p), 0, 1)[0]
      out[at, idx] = self.rows[p][i]
      filled[at] = True
    out[~filled] = out[np.argmax(filled)]
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
    n = max(stop - start, 0)
    out = np.zeros((n, len(self.fs.vars)))
    lab = self._labels(n)
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    out[:, list(self.pool_idx)] = self.pools[p]
    stride = 1  # rows of the later blocks per row of this one
    for i in reversed(range(len(self.other))):
      r = rows[i]
      # Row k takes this block's row (k // stride) % len(r): runs of ``stride``
      # equal rows, gathered once per run and repeated.
      runs = np.arange(start // stride, (stop - 1) // stride + 1, dtype=np.int64) if n else (
          np.zeros(0, np.int64))
      digit = runs % len(r)
      cols = _columns(self.other[i][1])
      if stride == 1:
        out[:, cols] = r[digit]
        lab[:, m + i] = self._label(i, p, digit)
      else:
        counts = np.minimum((runs + 1) * stride, stop) - np.maximum(runs * stride, start)
        out[:, cols] = np.repeat(r[digit], counts, axis=0)
        lab[:, m + i] = np.repeat(self._label(i, p, digit), counts)
      stride *= len(r)
    return (out, lab) if labels else out

  def chunks(self, size: int):
    """Every valid row with its labels in enumeration order, ``size`` rows at a
    time (the last chunk shorter), pool combinations run together: yields
    ``(rows, labels)``."""
    buf, held = [], 0
    for p, count in enumerate(self.counts.astype(np.int64)):
      for start in range(0, int(count), size):
        buf.append(self.decode(p, start, min(start + size, int(count)), labels=True))
        held += len(buf[-1][0])
        while held >= size:
          rows, labels = buf[0] if len(buf) == 1 else (np.concatenate(a, 0) for a in zip(*buf))
          yield rows[:size], labels[:size]
          held -= size
          buf = [(rows[size:], labels[size:])] if held else []
    if held:
      yield buf[0] if len(buf) == 1 else tuple(np.concatenate(a, 0) for a in zip(*buf))

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
