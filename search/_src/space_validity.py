"""Which value vectors of a family give a plan that runs, and their repair.

Readings of the cost model's rule table (:data:`costmodel.internal.RULES`), numpy,
vectorised over rows of value vectors.
"""

from __future__ import annotations

import numpy as np

from costmodel import internal as cmi
from search._src import result as result_lib
from search._src.space_options import LAYOUT_ROLES
from search._src.space_options import TRAINED_ROLES
from search._src.space_options import cover
from search._src.space_structure import role_layout_fields


class Outer:
  """Value vectors [K, G, V] held as the parts they are built from, for
  :meth:`FamilyValidity.valid`, which reads them column by column: ``grid``
  [G, len(idx)] the values of variables ``idx``, ``keys`` [K, len(cols)] those
  of variables ``cols`` (set last), every other variable its value in ``base``
  [V]. A column is read as its part broadcast ([1, G], [K, 1] or a scalar), so
  the rules cost about a rule per key and grid row and the K x G x V array is
  never built (DeepSeek-V3's split family on 16,384 H800: every valid actor
  and engine row over 212,993 pool splits).
  """

  def __init__(self, base: np.ndarray, idx, grid: np.ndarray, cols, keys: np.ndarray):
    self.shape = (len(keys), len(grid), len(base))
    grid, keys = np.asarray(grid, np.float64), np.asarray(keys, np.float64)
    self._columns = [np.float64(x) for x in base]
    for c, j in enumerate(idx):
      self._columns[j] = grid[None, :, c]
    for d, j in enumerate(cols):
      self._columns[j] = keys[:, None, d]

  def __getitem__(self, key):
    if not (isinstance(key, tuple) and len(key) == 2 and key[0] is Ellipsis):
      raise ValueError(f"Outer: only values[..., column] reads a column, got {key!r}")
    return self._columns[key[1]]


class FamilyValidity:
  """Validity and repair of a :class:`search._src.space.FamilySpace` (its
  ``structure``, ``vars``, ``job``, ``cluster``, ``index`` and ``var``)."""

  def col(self, values: np.ndarray, name: str) -> np.ndarray:
    return values[..., self.index(name)]

  def pool_of(self, values: np.ndarray, role: str) -> np.ndarray:
    return self.col(values, f"pool.{self.structure.placement.pool_of(role)}")

  @property
  def blocks(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Variables grouped into blocks whose validity depends only on the block
    and the pools: ``pools``, one block per role with its own layout (the
    actor's holds the reference's offload), ``engine``."""
    groups: dict[str, list[int]] = {}
    for j, name in enumerate(self.names):
      groups.setdefault(self.block_of(name), []).append(j)
    return tuple((k, tuple(v)) for k, v in groups.items())

  def option_grid(self, idx, max_rows: int | None = None,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """Every combination of the options of variables ``idx`` ([N, len(idx)],
    float64, lexicographic, the last variable fastest); beyond ``max_rows``
    combinations, ``max_rows`` rows drawn uniformly with ``rng``."""
    opts = [np.asarray(self.vars[j].options, np.float64) for j in idx]
    if max_rows is not None and np.prod([len(o) for o in opts], dtype=float) > max_rows:
      if rng is None:
        raise ValueError(f"option_grid: max_rows={max_rows} needs an rng to sample with")
      return np.stack([rng.choice(o, max_rows) for o in opts], -1).reshape(max_rows, len(opts))
    return np.stack([g.ravel() for g in np.meshgrid(*opts, indexing="ij")],
                    -1).reshape(-1, len(opts))

  def pool_grid(self, max_rows: int | None = None,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """The combinations of pool sizes that fit the cluster: :meth:`option_grid`
    of the ``pools`` block, rows that break the rule table's ``pools`` rules
    (``pools_within_cluster``) dropped."""
    grid = self.option_grid(dict(self.blocks)["pools"], max_rows, rng)
    ok = cmi.rule_mask("pools", {"total": grid.sum(-1),
                                 "cluster_gpus": float(self.cluster.n_gpus)})
    return grid[np.broadcast_to(ok, grid.shape[:1])]

  def block_of(self, name: str) -> str:
    """The block of variable ``name`` (or of a role's variables, ``name`` a
    role): its head (``pool`` -> ``pools``, the reference in the actor's); a
    role with variables tied to another role's joins that role's block."""
    def head(n: str) -> str:
      h = n.split(".")[0]
      return {"pool": "pools", "reference": "actor"}.get(h, h)

    merged = {head(a): head(b) for a, b in self.structure.ties if head(a) != head(b)}
    h = head(name)
    while h in merged:
      h = merged[h]
    return h

  def block_pools(self, block: str) -> tuple[int, ...]:
    """Columns of the pool sizes that the rules of ``block`` read: every pool
    for ``pools``, the rollout pool for the engine, a role's own pool."""
    if block == "pools":
      return tuple(self.index(f"pool.{p}") for p in self.structure.pools)
    if block == "engine":
      return (self.index(f"pool.{self.rollout_pool}"),)
    roles = [r for r in LAYOUT_ROLES if r in self.structure.roles and self.block_of(r) == block]
    return tuple(sorted({self.index(f"pool.{self.structure.placement.pool_of(r)}")
                         for r in roles}))

  def valid_replacing(self, row: np.ndarray, idx, grid: np.ndarray) -> np.ndarray:
    """:meth:`valid` of copies of the valid ``row`` [V] whose block columns
    ``idx`` (one block of :attr:`blocks`) take each row of ``grid`` [N, len(idx)].

    A role's or the engine's block is checked by its own rules only (the rest
    of the row is valid and does not change). A grid of pool sizes is checked
    by the pools' rules on every row and by each other block's rules once per
    distinct size of the pools that block reads (a three-pool grid of 100,000
    rows has a few hundred sizes per pool).
    """
    idx = list(idx)
    block = self.block_of(self.names[idx[0]])
    cand = np.tile(np.asarray(row, np.float64), (len(grid), 1))
    cand[:, idx] = grid
    ok = self.valid(cand, blocks=(block,))
    if block != "pools":
      return ok
    for other, _ in self.blocks:
      cols = list(self.block_pools(other)) if other != "pools" else []
      if not cols:
        continue
      keys, inv = result_lib.distinct_rows(cand[:, cols])
      rows = np.tile(cand[0], (len(keys), 1))
      rows[:, cols] = keys
      ok &= self.valid(rows, blocks=(other,))[inv]
    return ok

  def valid(self, values: np.ndarray, blocks=None) -> np.ndarray:
    """Which value vectors give a plan that runs (and is not a duplicate).

    The rules are the cost model's rule table (:data:`costmodel.internal.RULES`, read
    by :func:`costmodel.internal.rule_mask`): those :func:`costmodel.validate_plan`
    checks plus the optional ``zero3`` set (ZeRO-3 only without TP/PP/EP).
    It also drops equivalent duplicates: a micro-batch or concurrency cap
    above what a rank or engine holds acts like the smallest option that
    covers it.

    Args:
      values: [..., V] value vectors, or an :class:`Outer` product of them.
      blocks: Names of the blocks (see :attr:`blocks`) whose constraints to
        check; all when None.
    """
    if not isinstance(values, Outer):
      values = np.asarray(values, dtype=np.float64)
    check = set(b for b, _ in self.blocks) if blocks is None else set(blocks)
    ok = np.ones(values.shape[:-1], dtype=bool)
    if "pools" in check:
      for p in self.structure.pools:
        ok &= cmi.rule_mask("pool", {"gpus": self.col(values, f"pool.{p}")})
      ok &= cmi.rule_mask("pools", self._pools_fields(values))
    samples = float(self.job.samples_per_step)
    train_batch = samples / self.job.mini_batches
    for role in LAYOUT_ROLES:
      if role not in self.structure.roles or self.block_of(role) not in check:
        continue
      fields = self._layout_fields(values, role)
      ok &= cmi.rule_mask("layout", fields, self.structure.rule_sets)
      dp = fields["gpus"] / (fields["tp"] * fields["pp"] * fields["cp"])
      mb_names = ("mb_train", "mb_infer") if role in TRAINED_ROLES else ("mb_infer",)
      for mb_name in mb_names:
        mb = self.col(values, f"{role}.{mb_name}")
        per_rank = (train_batch if mb_name == "mb_train" else samples) / dp
        ok &= (mb < 2.0 * per_rank) | (mb == self.var(f"{role}.{mb_name}").options[0])
    if "engine" in check:
      fields = self._engine_fields(values)
      ok &= cmi.rule_mask("engine", fields)
      g, etp, epp = fields["gpus"], fields["tp"], fields["pp"]
      n_r = float(self.job.generated_samples_per_step) / (g / (etp * epp))
      ms = self.col(values, "engine.max_seqs")
      ok &= (ms < 2.0 * n_r) | (ms == self.var("engine.max_seqs").options[0])
    return ok

  def runs(self, values: np.ndarray) -> np.ndarray:
    """Which value vectors give a plan whose layouts :func:`costmodel.validate_plan`
    accepts: the rule table's per-plan rules (pools, each role's training and
    inference layout, the engine) without the space's optional rule sets, read
    vectorised over rows. Unlike :meth:`valid` it keeps duplicates. The rules
    that are the same for every plan of the family (roles, placement,
    schedule) are not read here.

    Args:
      values: [..., V] value vectors.
    """
    values = np.asarray(values, dtype=np.float64)
    ok = np.ones(values.shape[:-1], dtype=bool)
    for p in self.structure.pools:
      ok &= cmi.rule_mask("pool", {"gpus": self.col(values, f"pool.{p}")})
    ok &= cmi.rule_mask("pools", self._pools_fields(values))
    col = lambda n: self.col(values, n)
    for role in self.structure.roles:
      src = "actor" if role == "reference" else role  # the reference runs the actor's
      for phase in (("train", "infer") if role in TRAINED_ROLES else ("infer",)):
        fields = role_layout_fields(self.structure, self.job, src, col,
                                     self.pool_of(values, role), np, phase)
        ok &= cmi.rule_mask("layout", fields)
    return ok & cmi.rule_mask("engine", self._engine_fields(values))

  @property
  def rollout_pool(self) -> str:
    return self.structure.placement.rollout_pool

  def _layout_fields(self, values: np.ndarray, role: str) -> dict:
    """The rule table's ``layout`` fields of ``role`` over rows of values."""
    return role_layout_fields(self.structure, self.job, role, lambda n: self.col(values, n),
                               self.pool_of(values, role), np)

  def _engine_fields(self, values: np.ndarray) -> dict:
    """The rule table's ``engine`` fields over rows of values."""
    etp = self.col(values, "engine.tp")
    ep = np.where(self.col(values, "engine.ep") > 0.5, etp, 1.0)
    return cmi.engine_fields(self.job.actor, self.col(values, f"pool.{self.rollout_pool}"), etp,
                            self.col(values, "engine.pp"), ep)

  def _pools_fields(self, values: np.ndarray) -> dict:
    total = sum(self.col(values, f"pool.{p}") for p in self.structure.pools)
    return {"total": total, "cluster_gpus": float(self.cluster.n_gpus)}

  def _violation(self, scope: str, fields: dict, rule: str) -> np.ndarray:
    """By how much each row breaks the table's rule ``rule`` (0: it holds)."""
    return cmi.rule_violations(scope, fields, self.structure.rule_sets, only=(rule,))[rule]

  def _violated(self, scope: str, fields: dict, rule: str) -> np.ndarray:
    """Rows that break the table's rule ``rule``."""
    return self._violation(scope, fields, rule) > 0

  def _shrink_pools(self, v: np.ndarray) -> None:
    """Oversized pools shrink in place: the largest pool (the first of equals)
    steps down its options until the pools fit the cluster or another pool is
    the largest, which then steps down. Each run of steps of one pool is one
    jump: to the largest option below it at which the pools fit or it is no
    longer the largest (its smallest option when neither comes). The rule
    table's ``pools_within_cluster`` says by how many GPUs the pools exceed
    the cluster: the pool fits that many GPUs smaller."""
    pool_names = [f"pool.{p}" for p in self.structure.pools]
    cols = [self.index(p) for p in pool_names]
    for _ in range(len(pool_names) * max(len(self.var(p).options) for p in pool_names)):
      excess = self._violation("pools", self._pools_fields(v), "pools_within_cluster")
      over = excess > 0
      if not over.any():
        return
      sizes = v[..., cols]
      big = np.argmax(sizes, -1)
      moved = False
      for k, p in enumerate(pool_names):
        sel = over & (big == k)
        if not sel.any():
          continue
        x, rest = sizes[sel][:, k], np.delete(sizes[sel], k, -1)
        opts = np.asarray(self.var(p).options, np.float64)
        fits = x - excess[sel]  # the largest size at which the pools fit
        before = rest[:, :k].max(-1) if k else np.full(len(x), -np.inf)
        after = rest[:, k:].max(-1) if k < len(pool_names) - 1 else np.full(len(x), -np.inf)
        # The largest option below x that fits, or at which an earlier pool is
        # at least as large or a later one larger.
        below = np.searchsorted(opts, x) - 1
        stop = np.maximum.reduce([np.searchsorted(opts, fits, "right") - 1,
                                  np.searchsorted(opts, before, "right") - 1,
                                  np.searchsorted(opts, after, "left") - 1])
        new = opts[np.clip(np.minimum(stop, below), 0, len(opts) - 1)]
        moved |= bool((new != x).any())
        v[sel, cols[k]] = new
      if not moved:
        return

  def repair(self, values: np.ndarray) -> np.ndarray:
    """Moves value vectors towards validity: ZeRO-3 drops TP/PP/EP, degrees that
    do not divide their pool are halved (pp, then cp, then tp), expert degrees
    that do not fold into a pipeline stage are halved, interleaving that the
    pipeline does not admit is halved, oversized pools shrink.
    Which rule a row breaks comes from the rule table. The result may still be
    invalid; :meth:`valid` decides."""
    v = np.array(values, dtype=np.float64, copy=True)
    idx = self.index
    self._shrink_pools(v)
    for role in LAYOUT_ROLES:
      if role not in self.structure.roles:
        continue
      zero3 = self._violated("layout", self._layout_fields(v, role), "zero3_alone")
      for d in ("tp", "pp", "ep"):
        v[zero3, idx(f"{role}.{d}")] = 1.0
      for _ in range(16):
        bad = self._violated("layout", self._layout_fields(v, role), "layout_divides_pool")
        if not bad.any():
          break
        for d in ("pp", "cp", "tp"):
          col = v[..., idx(f"{role}.{d}")]
          sel = bad & (col > 1)
          v[sel, idx(f"{role}.{d}")] = col[sel] / 2
          bad &= ~sel
      for _ in range(16):
        bad = self._violated("layout", self._layout_fields(v, role), "ep_folds_into_stage")
        if not bad.any():
          break
        j = idx(f"{role}.ep")
        v[bad, j] = v[bad, j] / 2
      if f"{role}.vpp" in self.names:
        j = idx(f"{role}.vpp")
        for _ in range(8):
          fields = self._layout_fields(v, role)
          bad = (self._violated("layout", fields, "vpp_needs_pp")
                 | self._violated("layout", fields, "vpp_divides_layers"))
          if not bad.any():
            break
          v[bad, j] = np.maximum(v[bad, j] / 2, 1.0)
    samples = float(self.job.samples_per_step)
    for role in LAYOUT_ROLES:
      if role not in self.structure.roles:
        continue
      g = self.pool_of(v, role)
      dp = g / (v[..., idx(f"{role}.tp")] * v[..., idx(f"{role}.pp")] * v[..., idx(f"{role}.cp")])
      mb_names = ("mb_train", "mb_infer") if role in TRAINED_ROLES else ("mb_infer",)
      for mb_name in mb_names:
        batch = samples / self.job.mini_batches if mb_name == "mb_train" else samples
        j = idx(f"{role}.{mb_name}")
        v[..., j] = np.minimum(v[..., j], cover(batch / dp, self.vars[j].options))
    g = self.col(v, f"pool.{self.rollout_pool}")
    for _ in range(16):
      bad = self._violated("engine", self._engine_fields(v), "engine_divides_pool")
      if not bad.any():
        break
      for d in ("engine.pp", "engine.tp"):
        col = v[..., idx(d)]
        sel = bad & (col > 1)
        v[sel, idx(d)] = col[sel] / 2
        bad &= ~sel
    n_r = float(self.job.generated_samples_per_step) / (
        g / (v[..., idx("engine.tp")] * v[..., idx("engine.pp")]))
    j = idx("engine.max_seqs")
    v[..., j] = np.minimum(v[..., j], cover(n_r, self.vars[j].options))
    return v
