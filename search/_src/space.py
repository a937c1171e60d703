"""The search space: placement families and the layout variables inside each.

A *family* is a registered :class:`costmodel.Placement` (see
:func:`costmodel.placements`): it fixes the pools, which role sits on which,
the rollout pool, the execution mode and the jobs it applies to.

The family is *enumerated*, not relaxed: the search optimises inside each
family and compares the families' rounded plans exactly. Inside a family every
plan is a vector of values, one per :class:`Var`:

* ``pool.<name>``: GPUs of each pool (relaxed: one GPU plus a softmax share of
  the remaining GPUs; discrete: see :func:`build`: any count for a pool
  without a trained role, ``dp x 2^k`` with ``dp`` dividing the mini-batch for
  a training pool, and a framework's node rule);
* per role with its own layout (actor, critic, reward model): ``tp``, ``pp``,
  ``cp``, ``ep`` and the micro-batches ``mb_train`` and ``mb_infer`` (relaxed:
  log2 of the value; discrete: powers of two), and the categorical
  ``zero`` (1, or 3 for FSDP-style sharding, which needs tp = pp = ep = 1),
  ``recompute`` (0 none, 1 selective, 2 full) and ``offload`` (0, 1);
* the reference model runs the actor's inference layout (the frameworks give
  the reference the actor's parallel settings), with its own ``offload``;
* the engine: ``tp``, ``pp``, ``max_seqs`` (log2), ``memory_fraction``
  (relaxed: a sigmoid onto its range) and, for MoE models, the categorical
  ``ep`` (0: no expert parallelism, 1: experts sharded over the TP group).

A role's training and inference phases share its degrees (both run on the same
workers with one sharding) and differ in micro-batch. Categorical variables are
fixed per start during the relaxed phase and enumerated at rounding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm

# Names of the registered placement families, in registry order.
FAMILIES = tuple(p.name for p in cm.placements())

# Roles that carry their own parallel degrees (the reference follows the actor).
_LAYOUT_ROLES = ("actor", "critic", "reward")
_TRAINED = ("actor", "critic")

# Variable kinds.
LOG2 = "log2"   # powers of two; relaxed as log2 of the value
FRAC = "frac"   # a fraction; relaxed through a sigmoid onto the options' range
POOL = "pool"   # GPUs of a pool; relaxed as softmax(logits) * cluster GPUs
CAT = "cat"     # categorical; fixed per start while relaxed


def _powers_of_two(hi: float) -> tuple[int, ...]:
  out, v = [], 1
  while v <= hi:
    out.append(v)
    v *= 2
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class SpaceOptions:
  """The discrete values each layout variable may take.

  Attributes:
    max_tp: Largest tensor-parallel degree of a role (0: the scale-up domain).
    max_pp: Largest pipeline-parallel degree of a role.
    max_cp: Largest context-parallel degree (1 switches CP off).
    max_ep: Largest expert-parallel degree (MoE models only).
    micro_batches: Micro-batch sizes (sequences per GPU), powers of two.
    zero_stages: ZeRO stages tried (1 and/or 3; 3 only with tp = pp = ep = 1).
    recompute: Activation recompute modes (0 none, 1 selective, 2 full).
    offload: Offload settings (0, 1).
    engine_max_tp: Largest engine tensor-parallel degree (0: the domain).
    engine_max_pp: Largest engine pipeline-parallel degree.
    memory_fractions: Engine memory fractions, ascending.
    max_seqs: Engine concurrency caps, powers of two.
    engine_ep: Engine expert-parallel settings tried on MoE models (0: none,
      1: experts sharded over the engine's TP group).
  """

  max_tp: int = 0
  max_pp: int = 16
  max_cp: int = 1
  max_ep: int = 64
  micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
  zero_stages: tuple[int, ...] = (1, 3)
  recompute: tuple[int, ...] = (0, 1, 2)
  offload: tuple[int, ...] = (0, 1)
  engine_max_tp: int = 0
  engine_max_pp: int = 8
  memory_fractions: tuple[float, ...] = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))
  max_seqs: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096)
  engine_ep: tuple[int, ...] = (0, 1)

  def __post_init__(self):
    for f in ("max_tp", "engine_max_tp"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 0:
        raise ValueError(f"SpaceOptions: {f}={v!r} must be an integer >= 0")
    for f in ("max_pp", "max_cp", "max_ep", "engine_max_pp"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 1:
        raise ValueError(f"SpaceOptions: {f}={v!r} must be an integer >= 1")
    for f in ("micro_batches", "max_seqs"):
      v = tuple(getattr(self, f))
      if not v or any(int(x) != x or x < 1 or (int(x) & (int(x) - 1)) for x in v):
        raise ValueError(f"SpaceOptions: {f}={v!r} must be powers of two >= 1")
      object.__setattr__(self, f, tuple(sorted(int(x) for x in v)))
    for f, allowed in (("zero_stages", (1, 3)), ("recompute", (0, 1, 2)), ("offload", (0, 1)),
                       ("engine_ep", (0, 1))):
      v = tuple(getattr(self, f))
      if not v or any(x not in allowed for x in v):
        raise ValueError(f"SpaceOptions: {f}={v!r} must be a non-empty subset of {allowed}")
      object.__setattr__(self, f, tuple(sorted(set(int(x) for x in v))))
    mf = tuple(float(x) for x in self.memory_fractions)
    if not mf or any(not 0.0 < x <= 1.0 for x in mf):
      raise ValueError(f"SpaceOptions: memory_fractions={mf!r} must lie in (0, 1]")
    object.__setattr__(self, "memory_fractions", tuple(sorted(set(mf))))

  @classmethod
  def compact(cls) -> SpaceOptions:
    """A coarser space, small enough to enumerate exhaustively on 8-32 GPUs."""
    return cls(max_pp=4, micro_batches=(1, 2, 4, 8, 16), engine_max_pp=1,
               memory_fractions=(0.5, 0.7, 0.9), max_seqs=(128, 512, 2048))


class Var(NamedTuple):
  """One variable of a family: its name, kind and discrete options (ascending)."""

  name: str
  kind: str
  options: np.ndarray


def default_families(job: cm.RLJob) -> tuple[str, ...]:
  """Families that apply to ``job`` (``split3`` needs a critic)."""
  return tuple(p.name for p in cm.placements(job))


def pool_sizes(cluster: cm.Cluster, nodes: str = "any") -> np.ndarray:
  """GPU counts a pool may hold on ``cluster``.

  Args:
    cluster: The cluster.
    nodes: ``any`` (every count), ``uniform`` (``nnodes x gpus`` with the same
      GPUs on each of at most ``cluster.nodes`` nodes, as Ray placement groups
      of ``num_nodes x num_gpus_per_node`` are written) or ``whole`` (part of
      one node on a one-node cluster, else whole nodes).
  """
  n, g = cluster.n_gpus, cluster.gpus_per_node
  sizes = np.arange(1, n + 1, dtype=np.float64)
  if nodes == "uniform":
    ok = [s <= g or any(s % k == 0 and s // k <= g for k in range(2, cluster.nodes + 1))
          for s in range(1, n + 1)]
    return sizes[np.asarray(ok)]
  if nodes == "whole":
    return sizes if cluster.nodes == 1 else sizes[sizes % g == 0]
  if nodes != "any":
    raise ValueError(f"pool_sizes: nodes={nodes!r} is not one of ('any', 'uniform', 'whole')")
  return sizes


def training_pool_sizes(sizes: np.ndarray, mini_batch_samples: float, max_model: int
                        ) -> np.ndarray:
  """The sizes of ``sizes`` whose data-parallel degree can divide the mini-batch:
  ``size = dp x m`` with ``m`` a power of two up to ``max_model`` (the model
  parallel degrees tp x pp x cp) and ``dp`` dividing ``mini_batch_samples``."""
  m = np.asarray(_powers_of_two(max(max_model, 1)), np.float64)
  dp = sizes[:, None] / m[None]
  ok = (dp == np.round(dp)) & (dp >= 1) & (np.mod(mini_batch_samples, np.maximum(dp, 1)) == 0)
  return sizes[ok.any(-1)]


@dataclasses.dataclass(frozen=True)
class Structure:
  """What jitted code specialises on: the family, its roles and variable order.

  Attributes:
    family: The placement family.
    roles: The job's roles.
    names: Variable names, in the order of a value vector.
    n_gpus: GPUs of the cluster.
    ties: ``(name, source)`` pairs: ``name`` takes the value of ``source``
      (a framework that gives the critic the actor's degrees); the tied
      variable keeps one placeholder option and is never read.
    rule_sets: Optional rule sets of the rule table the layouts obey.
  """

  family: str
  roles: tuple[str, ...]
  names: tuple[str, ...]
  n_gpus: int
  ties: tuple[tuple[str, str], ...] = ()
  rule_sets: tuple[str, ...] = ("zero3", "batch")

  @property
  def placement(self) -> cm.Placement:
    return cm.placement(self.family)

  @property
  def pools(self) -> tuple[str, ...]:
    return self.placement.pools

  @property
  def mode(self) -> cm.Mode:
    return self.placement.mode

  def index(self, name: str) -> int:
    """Column of ``name`` in a value vector (a tied name: its source's)."""
    return self.names.index(dict(self.ties).get(name, name))

  def to_plan(self, v) -> cm.Plan:
    """The plan of one value vector ``v`` (numpy: concrete; jax: traceable)."""
    concrete = isinstance(v, np.ndarray)
    get = (lambda n: float(v[self.index(n)])) if concrete else (lambda n: v[self.index(n)])
    pool_gpus = {p: get(f"pool.{p}") for p in self.pools}

    def layout(role: str, mb: str, offload_role: str | None = None) -> cm.Parallel:
      return cm.Parallel(tp=get(f"{role}.tp"), pp=get(f"{role}.pp"), cp=get(f"{role}.cp"),
                         ep=get(f"{role}.ep"), micro_batch=get(f"{role}.{mb}"),
                         zero_stage=get(f"{role}.zero"),
                         recompute=get(f"{role}.recompute") if role in _TRAINED else 0.0,
                         offload=get(f"{offload_role or role}.offload"))

    train = {r: layout(r, "mb_train") for r in self.roles if r in _TRAINED}
    infer = {r: layout("actor", "mb_infer", "reference") if r == "reference"
             else layout(r, "mb_infer") for r in self.roles}
    tp = get("engine.tp")
    ep_on = get("engine.ep")
    if concrete:
      ep = tp if ep_on > 0.5 else 1.0
    else:
      ep = jnp.where(ep_on > 0.5, tp, 1.0)
    engine = cm.Engine(tp=tp, pp=get("engine.pp"), ep=ep,
                       memory_fraction=get("engine.memory_fraction"),
                       max_seqs=get("engine.max_seqs"))
    return self.placement.plan(pool_gpus, self.roles, engine, train=train, infer=infer)


def _tp_options(model: cm.ModelSpec, hi: int) -> list[int]:
  """Powers of two up to ``hi`` that pass the rule table's head rules."""
  t = np.asarray(_powers_of_two(hi), dtype=np.float64)
  ok = cm.rule_mask("layout", cm.layout_fields(model, t, t, 1.0, 1.0, 1.0),
                    only=("tp_divides_heads", "tp_kv_heads"))
  return [int(x) for x in t[ok]]


def _role_model(job: cm.RLJob, role: str) -> cm.ModelSpec:
  return {"actor": job.actor, "critic": job.critic, "reward": job.reward_model}[role]


def _role_layout_fields(structure: Structure, job: cm.RLJob, role: str, get, gpus, xp) -> dict:
  """The rule table's ``layout`` fields of ``role`` (``get(name)``: a column of
  values, numpy or jax); a trained role carries its batch (the batch rules)."""
  trained = role in _TRAINED
  samples = job.samples_per_step
  if xp is np:
    samples = float(samples)
  return cm.layout_fields(_role_model(job, role), gpus,
                          *(get(f"{role}.{d}") for d in ("tp", "pp", "cp", "ep")),
                          zero=get(f"{role}.zero"),
                          micro_batch=get(f"{role}.mb_train") if trained else 1.0,
                          samples=samples, mini_batch_samples=samples / job.mini_batches,
                          trained=trained)


@dataclasses.dataclass(frozen=True, eq=False)
class FamilySpace:
  """A family's variables and options for one job and cluster.

  Attributes:
    structure: The :class:`Structure` jitted code specialises on.
    vars: The variables, in the order of a value vector.
    job: The job.
    cluster: The cluster.
  """

  structure: Structure
  vars: tuple[Var, ...]
  job: cm.RLJob
  cluster: cm.Cluster

  @property
  def family(self) -> str:
    return self.structure.family

  @property
  def names(self) -> tuple[str, ...]:
    return self.structure.names

  def index(self, name: str) -> int:
    return self.structure.index(name)

  def var(self, name: str) -> Var:
    return self.vars[self.index(name)]

  def to_plan(self, v) -> cm.Plan:
    return self.structure.to_plan(v)

  @property
  def size(self) -> int:
    """Number of value vectors before validity checks (may be huge)."""
    return math.prod(len(v.options) for v in self.vars)

  # ----- validity (numpy, vectorised over rows) ------------------------------

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

  def valid(self, values: np.ndarray, blocks=None) -> np.ndarray:
    """Which value vectors give a plan that runs (and is not a duplicate).

    The rules are the cost model's rule table (:data:`costmodel.RULES`, read
    by :func:`costmodel.rule_mask`): those :func:`costmodel.validate_plan`
    checks plus the optional ``zero3`` set (ZeRO-3 only without TP/PP/EP).
    It also drops equivalent duplicates: a micro-batch or concurrency cap
    above what a rank or engine holds acts like the smallest option that
    covers it.

    Args:
      values: [..., V] value vectors.
      blocks: Names of the blocks (see :attr:`blocks`) whose constraints to
        check; all when None.
    """
    values = np.asarray(values, dtype=np.float64)
    check = set(b for b, _ in self.blocks) if blocks is None else set(blocks)
    ok = np.ones(values.shape[:-1], dtype=bool)
    if "pools" in check:
      for p in self.structure.pools:
        ok &= cm.rule_mask("pool", {"gpus": self.col(values, f"pool.{p}")})
      ok &= cm.rule_mask("pools", self._pools_fields(values))
    samples = float(self.job.samples_per_step)
    train_batch = samples / self.job.mini_batches
    for role in _LAYOUT_ROLES:
      if role not in self.structure.roles or self.block_of(role) not in check:
        continue
      fields = self._layout_fields(values, role)
      ok &= cm.rule_mask("layout", fields, self.structure.rule_sets)
      dp = fields["gpus"] / (fields["tp"] * fields["pp"] * fields["cp"])
      mb_names = ("mb_train", "mb_infer") if role in _TRAINED else ("mb_infer",)
      for mb_name in mb_names:
        mb = self.col(values, f"{role}.{mb_name}")
        per_rank = (train_batch if mb_name == "mb_train" else samples) / dp
        ok &= (mb < 2.0 * per_rank) | (mb == self.var(f"{role}.{mb_name}").options[0])
    if "engine" in check:
      fields = self._engine_fields(values)
      ok &= cm.rule_mask("engine", fields)
      g, etp, epp = fields["gpus"], fields["tp"], fields["pp"]
      n_r = float(self.job.generated_samples_per_step) / (g / (etp * epp))
      ms = self.col(values, "engine.max_seqs")
      ok &= (ms < 2.0 * n_r) | (ms == self.var("engine.max_seqs").options[0])
    return ok

  @property
  def rollout_pool(self) -> str:
    return self.structure.placement.rollout_pool

  def _layout_fields(self, values: np.ndarray, role: str) -> dict:
    """The rule table's ``layout`` fields of ``role`` over rows of values."""
    return _role_layout_fields(self.structure, self.job, role, lambda n: self.col(values, n),
                               self.pool_of(values, role), np)

  def _engine_fields(self, values: np.ndarray) -> dict:
    """The rule table's ``engine`` fields over rows of values."""
    etp = self.col(values, "engine.tp")
    ep = np.where(self.col(values, "engine.ep") > 0.5, etp, 1.0)
    return cm.engine_fields(self.job.actor, self.col(values, f"pool.{self.rollout_pool}"), etp,
                            self.col(values, "engine.pp"), ep)

  def _pools_fields(self, values: np.ndarray) -> dict:
    total = sum(self.col(values, f"pool.{p}") for p in self.structure.pools)
    return {"total": total, "cluster_gpus": float(self.cluster.n_gpus)}

  def _violated(self, scope: str, fields: dict, rule: str) -> np.ndarray:
    """Rows that break the table's rule ``rule``."""
    return cm.rule_violations(scope, fields, self.structure.rule_sets, only=(rule,))[rule] > 0

  def repair(self, values: np.ndarray) -> np.ndarray:
    """Moves value vectors towards validity: ZeRO-3 drops TP/PP/EP, degrees that
    do not divide their pool are halved (pp, then cp, then tp), expert degrees
    that do not fold into a pipeline stage are halved, oversized pools shrink.
    Which rule a row breaks comes from the rule table. The result may still be
    invalid; :meth:`valid` decides."""
    v = np.array(values, dtype=np.float64, copy=True)
    idx = self.index
    pool_names = [f"pool.{p}" for p in self.structure.pools]
    for _ in range(len(self.var(pool_names[0]).options)):
      over = self._violated("pools", self._pools_fields(v), "pools_within_cluster")
      if not over.any():
        break
      cols = np.stack([v[..., idx(p)] for p in pool_names], -1)
      big = np.argmax(cols, -1)
      for k, p in enumerate(pool_names):
        sel = over & (big == k)
        v[sel, idx(p)] = _step_option(v[sel, idx(p)], self.var(p).options, -1)
    for role in _LAYOUT_ROLES:
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
    samples = float(self.job.samples_per_step)
    for role in _LAYOUT_ROLES:
      if role not in self.structure.roles:
        continue
      g = self.pool_of(v, role)
      dp = g / (v[..., idx(f"{role}.tp")] * v[..., idx(f"{role}.pp")] * v[..., idx(f"{role}.cp")])
      mb_names = ("mb_train", "mb_infer") if role in _TRAINED else ("mb_infer",)
      for mb_name in mb_names:
        batch = samples / self.job.mini_batches if mb_name == "mb_train" else samples
        j = idx(f"{role}.{mb_name}")
        v[..., j] = np.minimum(v[..., j], _cover(batch / dp, self.vars[j].options))
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
    v[..., j] = np.minimum(v[..., j], _cover(n_r, self.vars[j].options))
    return v

  # ----- relaxed variables --------------------------------------------------

  def relaxed_bounds(self, cats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Box bounds of the relaxed parameters for starts whose categorical
    values are ``cats`` ([starts, V], only categorical columns read)."""
    s = cats.shape[0]
    lo = np.zeros((s, len(self.vars)))
    hi = np.zeros((s, len(self.vars)))
    for j, var in enumerate(self.vars):
      if var.kind == LOG2:
        lo[:, j], hi[:, j] = np.log2(var.options[0]), np.log2(var.options[-1])
      elif var.kind == FRAC:
        if len(var.options) > 1:
          lo[:, j], hi[:, j] = -4.0, 4.0
      elif var.kind == POOL:
        if len(self.structure.pools) > 1:
          lo[:, j], hi[:, j] = -8.0, 8.0
      else:
        lo[:, j] = hi[:, j] = cats[:, j]
    for role in _LAYOUT_ROLES:
      if role in self.structure.roles:
        zero3 = cats[:, self.index(f"{role}.zero")] == 3
        for d in ("tp", "pp", "ep"):
          hi[zero3, self.index(f"{role}.{d}")] = 0.0
    return lo, hi

  def init_relaxed(self, rng: np.random.Generator, starts: int) -> tuple[np.ndarray, ...]:
    """Random starts: relaxed parameters ``x0`` and their bounds ``lo, hi``.

    Log2 variables are uniform in their range, pool shares Dirichlet(1), the
    memory fraction uniform in logit space and categorical values uniform over
    their options.
    """
    v = len(self.vars)
    cats = np.zeros((starts, v))
    for j, var in enumerate(self.vars):
      if var.kind == CAT:
        cats[:, j] = rng.choice(var.options, size=starts)
    lo, hi = self.relaxed_bounds(cats)
    x0 = lo + (hi - lo) * rng.uniform(size=(starts, v))
    pool_idx = [self.index(f"pool.{p}") for p in self.structure.pools]
    if len(pool_idx) > 1:
      shares = rng.dirichlet(np.ones(len(pool_idx)), size=starts)
      x0[:, pool_idx] = np.log(np.maximum(shares, 1e-3))
    for j, var in enumerate(self.vars):
      if var.kind == FRAC and len(var.options) > 1:
        x0[:, j] = rng.uniform(-2.0, 2.0, size=starts)
      elif var.kind == CAT:
        x0[:, j] = cats[:, j]
    return x0, lo, hi

  def relaxed_values(self, x: jax.Array) -> jax.Array:
    """Relaxed parameters [V] -> continuous values [V] (traceable)."""
    out = []
    pool_idx = [self.index(f"pool.{p}") for p in self.structure.pools]
    # Every pool holds at least one GPU; the softmax shares the rest.
    n_pools = len(pool_idx)
    shares = 1.0 + jax.nn.softmax(x[jnp.asarray(pool_idx)]) * float(
        self.cluster.n_gpus - n_pools)
    for j, var in enumerate(self.vars):
      if var.kind == LOG2:
        out.append(jnp.exp2(x[j]))
      elif var.kind == FRAC:
        a, b = float(var.options[0]), float(var.options[-1])
        out.append(a + (b - a) * jax.nn.sigmoid(x[j]) if b > a else jnp.full((), a, x.dtype))
      elif var.kind == POOL:
        out.append(shares[pool_idx.index(j)])
      else:
        out.append(x[j])
    return jnp.stack(out)

  def nearest(self, values: np.ndarray) -> np.ndarray:
    """Each value rounded to its nearest option (log scale for degrees)."""
    out = np.empty_like(values, dtype=np.float64)
    for j, var in enumerate(self.vars):
      out[..., j] = _nearest_option(values[..., j], var)
    return out

  def bracket(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Neighbouring options below and above each value, and the weight of the
    upper one (linear in log2 for degrees and pools)."""
    lo = np.empty_like(values, dtype=np.float64)
    hi = np.empty_like(values, dtype=np.float64)
    w = np.zeros_like(values, dtype=np.float64)
    for j, var in enumerate(self.vars):
      opts = var.options
      x = values[..., j]
      log = var.kind in (LOG2, POOL)
      ox = np.log2(opts) if log else opts
      xx = np.log2(np.maximum(x, 1e-9)) if log else x
      k = np.clip(np.searchsorted(ox, xx, side="right") - 1, 0, len(opts) - 1)
      k2 = np.minimum(k + 1, len(opts) - 1)
      lo[..., j], hi[..., j] = opts[k], opts[k2]
      span = ox[k2] - ox[k]
      w[..., j] = np.where(span > 0, np.clip((xx - ox[k]) / np.where(span > 0, span, 1), 0, 1),
                           0.0)
    return lo, hi, w


def _nearest_option(x: np.ndarray, var: Var) -> np.ndarray:
  opts = var.options
  if var.kind in (LOG2, POOL):
    d = np.abs(np.log2(np.maximum(x, 1e-9))[..., None] - np.log2(opts))
  else:
    d = np.abs(np.asarray(x)[..., None] - opts)
  return opts[np.argmin(d, -1)]


def _cover(need: np.ndarray, options: np.ndarray) -> np.ndarray:
  """The smallest option >= ``need`` (the largest option when none is)."""
  k = np.searchsorted(options, np.asarray(need) - 1e-9)
  return options[np.minimum(k, len(options) - 1)]


def _step_option(x: np.ndarray, options: np.ndarray, step: int) -> np.ndarray:
  """The option ``step`` places away from ``x`` (clamped to the ends)."""
  k = np.searchsorted(options, x)
  k = np.clip(k + step, 0, len(options) - 1)
  return options[k]


def build(family: str, job: cm.RLJob, cluster: cm.Cluster,
          options: SpaceOptions | None = None, nodes: str = "any",
          ties: tuple[tuple[str, str], ...] = (),
          rule_sets: tuple[str, ...] = ("zero3", "batch")) -> FamilySpace | None:
  """The variables and options of ``family`` for ``job`` on ``cluster``.

  Pool sizes follow the rules that decide whether a pool runs: a pool without
  a trained role (the rollout pool, a reward model's) holds any number of
  GPUs (its engines' tensor x pipeline degree must divide it, checked per
  plan); a pool with a trained role holds ``dp x m`` GPUs, ``m`` a power of
  two, with ``dp`` dividing the mini-batch (the ``batch`` rule set); ``nodes``
  adds how a framework lays pools on nodes (:func:`pool_sizes`).

  Args:
    family: A registered placement family.
    job: The job.
    cluster: The cluster.
    options: The discrete options of each variable (defaults if None).
    nodes: How pools sit on nodes: ``any``, ``uniform`` or ``whole``.
    ties: ``(name, source)`` pairs of variables tied together (see
      :class:`Structure`); pairs naming a variable the job lacks are dropped.
    rule_sets: Optional rule sets of the rule table the layouts obey.

  Returns:
    A :class:`FamilySpace`, or None when the family cannot hold the job on
    this cluster (too few GPUs for its pools, or ``split3`` without a
    critic).

  Raises:
    ValueError: for an unknown family.
  """
  if family not in FAMILIES:
    raise ValueError(f"family={family!r} is not one of {FAMILIES}")
  placement = cm.placement(family)
  opts = options if options is not None else SpaceOptions()
  roles = cm.required_roles(job)
  if not placement.applies_to(job):
    return None
  pools = placement.pools
  n = cluster.n_gpus
  if len(pools) > n:
    return None
  domain = cluster.scaleup_domain
  vars_: list[Var] = []
  sizes = pool_sizes(cluster, nodes)
  sizes = sizes[sizes <= n - (len(pools) - 1)]
  max_model = (min(opts.max_tp or domain, n) * min(opts.max_pp, n) * min(opts.max_cp, n))
  mini_batch = float(job.samples_per_step) / job.mini_batches
  for p in pools:
    if len(pools) == 1:  # one pool holds the whole cluster
      vars_.append(Var(f"pool.{p}", POOL, np.asarray([float(n)])))
      continue
    trains = any(placement.pool_of(r) == p for r in roles if r in _TRAINED)
    opts_p = training_pool_sizes(sizes, mini_batch, max_model) if trains else sizes
    if not len(opts_p):
      return None
    vars_.append(Var(f"pool.{p}", POOL, opts_p))
  f64 = lambda xs: np.asarray(sorted(set(float(x) for x in xs)), dtype=np.float64)
  for role in _LAYOUT_ROLES:
    if role not in roles:
      continue
    model = {"actor": job.actor, "critic": job.critic, "reward": job.reward_model}[role]
    tp_hi = min(opts.max_tp or domain, n)
    vars_.append(Var(f"{role}.tp", LOG2, f64(_tp_options(model, tp_hi))))
    vars_.append(Var(f"{role}.pp", LOG2, f64(_powers_of_two(min(opts.max_pp, model.n_layers, n)))))
    vars_.append(Var(f"{role}.cp", LOG2, f64(_powers_of_two(min(opts.max_cp, n)))))
    if model.is_moe:
      e = np.asarray(_powers_of_two(min(opts.max_ep, model.n_experts, n)), dtype=np.float64)
      eps = e[cm.rule_mask("layout", cm.layout_fields(model, e, 1.0, 1.0, 1.0, e),
                           only=("ep_divides_experts",))]
    else:
      eps = [1]
    vars_.append(Var(f"{role}.ep", LOG2, f64(eps)))
    if role in _TRAINED:
      vars_.append(Var(f"{role}.mb_train", LOG2, f64(opts.micro_batches)))
    vars_.append(Var(f"{role}.mb_infer", LOG2, f64(opts.micro_batches)))
    vars_.append(Var(f"{role}.zero", CAT, f64(opts.zero_stages)))
    if role in _TRAINED:
      vars_.append(Var(f"{role}.recompute", CAT, f64(opts.recompute)))
    vars_.append(Var(f"{role}.offload", CAT, f64(opts.offload)))
    if role == "actor" and "reference" in roles:
      vars_.append(Var("reference.offload", CAT, f64(opts.offload)))
  actor = job.actor
  etp_hi = min(opts.engine_max_tp or domain, n)
  etp = np.asarray(_powers_of_two(etp_hi), dtype=np.float64)
  etp = etp[cm.rule_mask("engine", cm.engine_fields(actor, etp, etp, 1.0, 1.0),
                         only=("engine_tp_divides_heads",))]
  vars_.append(Var("engine.tp", LOG2, f64(etp)))
  vars_.append(Var("engine.pp", LOG2, f64(_powers_of_two(min(opts.engine_max_pp,
                                                             actor.n_layers, n)))))
  vars_.append(Var("engine.ep", CAT, f64(opts.engine_ep if actor.is_moe else (0,))))
  vars_.append(Var("engine.memory_fraction", FRAC, f64(opts.memory_fractions)))
  vars_.append(Var("engine.max_seqs", LOG2, f64(opts.max_seqs)))
  names = tuple(v.name for v in vars_)
  ties = tuple((a, b) for a, b in ties if a in names and b in names)
  tied = dict(ties)
  vars_ = [Var(v.name, v.kind, np.asarray([1.0])) if v.name in tied else v for v in vars_]
  structure = Structure(family=family, roles=roles, names=names, n_gpus=n, ties=ties,
                        rule_sets=tuple(rule_sets))
  return FamilySpace(structure=structure, vars=tuple(vars_), job=job, cluster=cluster)


# ----- constraint measures shared by the relaxed and the exact evaluation -------


def memory_excess(structure: Structure, v: jax.Array, est: cm.Estimate, job: cm.RLJob,
                  cluster: cm.Cluster) -> jax.Array:
  """How far a plan is from fitting in memory, relative to the limits.

  The sum over stages of ``Estimate.memory_excess`` (each stage's
  ``relu_tau(need / limit - 1)``, the generation row with the engine's own
  budget): zero when the plan fits, smooth at tau > 0. ``structure``, ``v``,
  ``job`` and ``cluster`` are not needed; they stay for the callers.
  """
  del structure, v, job, cluster
  return jnp.sum(est.memory_excess, axis=-1)


def layout_violation(structure: Structure, v: jax.Array, job: cm.RLJob,
                     tau: float = 1.0) -> jax.Array:
  """The rule table's penalty of (relaxed) values: its relaxed measures in log2
  units at ``tau > 0`` (e.g. ``relu(log2(tp pp cp) - log2(pool))`` per role,
  ``relu(log2 ep - log2(pool / pp))``, the engine's ``relu(log2(tp pp) -
  log2(rollout pool))``, ``relu(-log2 pool)``), its exact measures at ``tau = 0``.
  """
  get = lambda name: v[structure.index(name)]
  total = jnp.zeros((), v.dtype)
  for p in structure.pools:
    total = total + cm.rule_penalty("pool", {"gpus": get(f"pool.{p}")}, tau, xp=jnp)
  pools_total = sum(get(f"pool.{p}") for p in structure.pools)
  total = total + cm.rule_penalty("pools", {"total": pools_total,
                                            "cluster_gpus": float(structure.n_gpus)}, tau, xp=jnp)
  for role in _LAYOUT_ROLES:
    if role not in structure.roles:
      continue
    gpus = get(f"pool.{structure.placement.pool_of(role)}")
    fields = _role_layout_fields(structure, job, role, get, gpus, jnp)
    total = total + cm.rule_penalty("layout", fields, tau, structure.rule_sets, xp=jnp)
  rollout = structure.placement.rollout_pool
  etp = get("engine.tp")
  fields = cm.engine_fields(job.actor, get(f"pool.{rollout}"), etp, get("engine.pp"),
                            jnp.where(get("engine.ep") > 0.5, etp, 1.0))
  return total + cm.rule_penalty("engine", fields, tau, xp=jnp)
