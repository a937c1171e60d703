"""The valid space of a family as a product: pool combinations x each block's
valid rows, enumerated, sampled and labelled (the baselines' and the cut DP's
view of it)."""

from __future__ import annotations

import math

import numpy as np

from search._src import result as result_lib
from search._src import space as space_lib
from search._src import space_validity
from search._src.space_options import LAYOUT_ROLES


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
  equal on the variables it covers (what :func:`costmodel.internal.estimate_rows` groups
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
    inverse = []
    # Each block's valid rows over every key, in label order, in one array
    # (``_flat``; the keys' tables are views of it), and each key's row count.
    self._flat, self._key_counts, self._grid_pos = [], [], []
    for name, idx in self.other:
      deps = self.depends_on(name)
      keys, inv = result_lib.distinct_rows(combos[:, deps].reshape(len(combos), len(deps)))
      keys = [tuple(k) for k in keys]
      table = self.block_rows(name, idx, deps, keys)
      counts = np.asarray([len(table[k][0]) for k in keys], np.int64)
      flat = (np.concatenate([table[k][0] for k in keys]) if keys else
              np.zeros((0, len(idx))))
      self._grid_pos.append(np.concatenate([table[k][1] for k in keys]) if keys else
                            np.zeros(0, np.int64))
      del table
      self._flat.append(flat)
      self._key_counts.append(counts)
      inverse.append(inv.reshape(-1))
    counts = np.ones(len(combos))
    for key_counts, inv in zip(self._key_counts, inverse, strict=True):
      counts = counts * key_counts.astype(np.float64)[inv]
    keep = np.flatnonzero(counts > 0)
    self.pools = combos[keep]
    #: Per block, the index of each kept pool combination's key (its rows: :meth:`rows_of`).
    self.key_index = [inv[keep] for inv in inverse]
    self.counts = counts[keep]
    # Where each key's valid rows start among all of the block's, for labels.
    self._offsets = [np.cumsum(c) - c for c in self._key_counts]
    self._codes = None  # what :meth:`labels_of` searches, built on first use

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
             if r in LAYOUT_ROLES and fs.block_of(r) == block}
    if fs.block_of("engine") == block:
      pools.add(fs.rollout_pool)
    names = [fs.vars[j].name for j in self.pool_idx]
    return [k for k, n in enumerate(names) if n.removeprefix("pool.") in pools]

  def block_rows(self, block: str, idx, deps: list[int], keys: list[tuple],
                 max_rows: int = 1 << 20) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Valid rows of ``block`` (its variables ``idx``) for each ``keys`` entry
    (sizes of the pools ``deps``), checked in chunks of ``max_rows`` rows,
    with their positions in :meth:`FamilySpace.option_grid` (lexicographic:
    the mixed-radix code of their options' indices)."""
    fs = self.fs
    grid = fs.option_grid(idx)
    base = self._full(np.zeros((1, len(self.pool_idx))))[0]  # its idx and cols: Outer's
    out = {}
    per = max(1, max_rows // max(len(grid), 1))
    cols = [self.pool_idx[k] for k in deps]
    for start in range(0, len(keys), per):
      part = np.asarray(keys[start:start + per], np.float64).reshape(-1, len(deps))
      ok = fs.valid(space_validity.Outer(base, idx, grid, cols, part), blocks=(block,))
      for key, m in zip(keys[start:start + per], ok, strict=True):
        at = np.flatnonzero(m)
        out[key] = (grid[at], at)
    return out

  def rows_of(self, p: int, i: int) -> np.ndarray:
    """The valid rows of block ``i`` (of :attr:`other`) under pool combination
    ``p`` (a view of every valid row of the block)."""
    k = self.key_index[i][p]
    start = self._offsets[i][k]
    return self._flat[i][start:start + self._key_counts[i][k]]

  def total_rows(self, i: int) -> int:
    """Valid rows of block ``i`` (of :attr:`other`) over every pool size: its
    labels lie in ``[0, total_rows(i))``."""
    return len(self._flat[i])

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
      out[at, idx] = self.rows_of(p, i)
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
    n = max(stop - start, 0)
    out = np.zeros((n, len(self.fs.vars)))
    lab = self._labels(n)
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    out[:, list(self.pool_idx)] = self.pools[p]
    stride = 1  # rows of the later blocks per row of this one
    for i in reversed(range(len(self.other))):
      r = self.rows_of(p, i)
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

  def _option_index(self, values: np.ndarray, cols) -> np.ndarray:
    """Each value of ``values`` [n, len(cols)] (variables ``cols``) as its
    index among its variable's options; -1 where it is none of them (to a
    relative 1e-6)."""
    out = np.empty(values.shape, np.int64)
    for k, j in enumerate(cols):
      opts = np.asarray(self.fs.vars[j].options, np.float64)
      v = values[:, k]
      hi = np.clip(np.searchsorted(opts, v), 0, len(opts) - 1)
      lo = np.maximum(hi - 1, 0)
      at = np.where(np.abs(opts[lo] - v) <= np.abs(opts[hi] - v), lo, hi)
      ok = np.abs(opts[at] - v) <= 1e-6 * np.maximum(np.abs(v), 1.0)
      out[:, k] = np.where(ok, at, -1)
    return out

  def _code(self, idx: np.ndarray, cols) -> np.ndarray:
    """Option indices [n, len(cols)] as one mixed-radix integer per row."""
    code = np.zeros(len(idx), np.int64)
    for k, j in enumerate(cols):
      code = code * len(self.fs.vars[j].options) + idx[:, k]
    return code

  def _search_codes(self):
    """Sorted codes of the kept pool combinations and, per block, of its
    valid rows keyed by their pool sizes, with where each sorts from."""
    if self._codes is None:
      pools = self._code(self._option_index(self.pools, self.pool_idx), self.pool_idx)
      blocks = []
      for i, (_, idx) in enumerate(self.other):
        radix = math.prod(len(self.fs.vars[j].options) for j in idx)
        if radix * max(len(self._key_counts[i]), 1) >= 2**62:
          raise ValueError(f"Blocks: block {self.other[i][0]!r} has too many option "
                           "combinations to label rows by code")
        key = np.repeat(np.arange(len(self._key_counts[i])), self._key_counts[i])
        code = key * radix + self._grid_pos[i]
        order = np.argsort(code, kind="stable")
        blocks.append((radix, code[order], order))
      order = np.argsort(pools, kind="stable")
      self._codes = (pools[order], order, blocks)
    return self._codes

  def labels_of(self, values: np.ndarray) -> np.ndarray:
    """The labels [N, pools + blocks] of valid plans ``values`` [N, V] (as
    :meth:`decode` and :meth:`sample` give them), found by binary search.

    Raises:
      ValueError: for a row that is not a plan of this valid space.
    """
    lab, found = self.find(values)
    if not found.all():
      k = int(np.argmin(found))
      row = {n: float(x) for n, x in zip(self.fs.names, np.asarray(values, np.float64)[k])}
      raise ValueError(f"Blocks.labels_of: row {k} ({row}) is not a valid plan of family "
                       f"{self.fs.family!r}")
    return lab

  def find(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, found)``: :meth:`labels_of` of the rows of ``values`` that
    are plans of this valid space (``found``; the others' labels are
    meaningless). A row is found exactly when it is a valid plan: a check
    by binary search, far cheaper than the rule table's."""
    values = np.asarray(values, np.float64)
    pool_codes, pool_order, blocks = self._search_codes()
    n = len(values)
    idx = self._option_index(values, range(len(self.fs.vars)))  # every column
    found = (idx >= 0).all(1)
    code = self._code(np.maximum(idx[:, list(self.pool_idx)], 0), self.pool_idx)
    at = np.minimum(np.searchsorted(pool_codes, code), max(len(pool_codes) - 1, 0))
    found &= pool_codes[at] == code if len(pool_codes) else np.zeros(n, bool)
    p = pool_order[at] if len(pool_codes) else np.zeros(n, np.int64)
    lab = self._labels(n)
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    for i, ((_, cols), (radix, codes, order)) in enumerate(zip(self.other, blocks,
                                                                strict=True)):
      want = self.key_index[i][p] * radix + self._code(np.maximum(idx[:, list(cols)], 0), cols)
      at = np.minimum(np.searchsorted(codes, want), max(len(codes) - 1, 0))
      found &= codes[at] == want if len(codes) else np.zeros(n, bool)
      lab[:, m + i] = order[at] if len(codes) else 0
    return lab, found

  def sample(self, rng: np.random.Generator, n: int, labels: bool = False):
    """``n`` plans drawn uniformly from the valid space (and, with ``labels``,
    their labels as :meth:`decode` gives them): a pool combination in
    proportion to its plans, then each block's row uniformly among that
    combination's, gathered by label for all rows at once."""
    p = rng.choice(len(self.pools), size=n, p=self.counts / self.counts.sum())
    out = np.zeros((n, len(self.fs.vars)))
    lab = self._labels(n)
    m = len(self.pool_idx)
    lab[:, :m] = self._pool_labels(p)
    out[:, list(self.pool_idx)] = self.pools[p]
    for i, (_, idx) in enumerate(self.other):
      key = self.key_index[i][p]
      label = self._offsets[i][key] + rng.integers(0, self._key_counts[i][key])
      out[:, _columns(idx)] = self._flat[i][label]
      lab[:, m + i] = label
    return (out, lab) if labels else out
