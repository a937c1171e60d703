"""The relaxed sizing objective: pool sizes and GPU types as continuous variables.

A :class:`SizingSpace` wraps a family's layout space (:func:`search._src.space.build`)
and replaces its pool shares by free sizes: each pool's GPUs are ``2^x``
(``x`` continuous, from one node up to the largest group), so the size of the
cluster is itself a variable. Each pool's GPU type is a categorical
distribution, ``softmax`` of one logit per priced type (one distribution for
every pool together when the cluster holds one type). The objective of one
start is the expectation, over the assignments of types to pools, of

* ``log(cost per step) + w * (penalty + relu(log(step / target)))`` for the
  cheapest cluster meeting a target step time (``goal="cheapest"``), or
* ``log(step time) + w * (penalty + relu(log(cost per hour / budget)))`` for
  the fastest one under a budget (``goal="fastest"``),

where ``penalty`` is the layout search's (memory excess and rule-table
violation, :mod:`search._src.space_structure`) plus the GPUs a type's pools
take beyond its group. Each assignment's step time is the smooth cost model
(:func:`costmodel.estimate` at ``tau > 0``) with each pool on its type, all
assignments in one ``lax.map`` over the stacked accelerator figures (each
pool's figures carry the pool's name, so the weight sync between two pools is
timed over the NICs, as between whole nodes of one type too). A map, not a
``vmap``: the loop already vmaps over its starts, and the second batch
dimension made XLA's CPU fusion pass the bulk of the compile (one family's
loop compiles about 3.5x faster with ``lax.map``, for a warm sizing about 40%
slower). The
expectation is linear in the assignment probabilities, so its minimum is an
assignment (a vertex), which the gradient approaches. :func:`search._src.relax.run`
optimises it through the space's ``relaxed_objective``; the problem (job,
prices, groups, target) travels as the loop's ``job`` argument, so a sweep of
targets or prices reuses one compiled program.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm
from costmodel import internal as cmi
from search._src import space as space_lib
from search._src.space_options import LOG2

GOALS = ("cheapest", "fastest")
TYPE = "type"  # kind of a type logit (continuous, unbounded in practice)
_LOGIT_BOX = 6.0


@cmi.pytree_dataclass
class SizingProblem:
  """What the relaxed sizing objective reads besides the parameters (leaves).

  Attributes:
    job: The RL job.
    hardware: The priced accelerators, every figure stacked over types [K].
    price_per_gpu_hour: Price of each type [K].
    available_gpus: GPUs of each type's group [K].
    target_step_s: Longest acceptable step time (0: none).
    budget_per_hour: Highest acceptable price per hour (0: none).
    cheapest: 1: minimise the cost per step (meeting the target); 0: the step
      time (within the budget).
    share_type: 1: one type for every pool (the first pool's distribution);
      0: one distribution per pool.

  The goal and the type sharing are leaves, not structure: every problem of a
  family, job structure and cluster size runs one compiled program.
  """

  job: cm.RLJob
  hardware: cm.Hardware
  price_per_gpu_hour: jax.Array
  available_gpus: jax.Array
  target_step_s: jax.Array
  budget_per_hour: jax.Array
  cheapest: jax.Array
  share_type: jax.Array


def stack_hardware(types) -> cm.Hardware:
  """The presets ``types`` as one :class:`Hardware` whose figures are [K] arrays."""
  hws = [cm.hardware.get(t) for t in types]
  leaves = [np.asarray(xs, np.float32) for xs in zip(*(jax.tree.leaves(h) for h in hws),
                                                     strict=True)]
  return jax.tree.unflatten(jax.tree.structure(hws[0].replace(name="stacked")), leaves)


@dataclasses.dataclass(frozen=True)
class SizingStructure:
  """What the compiled objective specialises on.

  Attributes:
    base: The family's layout structure.
    n_types: How many GPU types are priced.
    gpus_per_node: GPUs per node.
    cluster_gpus: GPUs of the cluster the layout options are built on (the
      base space's), which the pools share.
  """

  base: space_lib.Structure
  n_types: int
  gpus_per_node: int
  cluster_gpus: int

  @property
  def pools(self) -> tuple[str, ...]:
    return self.base.pools

  @property
  def assignments(self) -> np.ndarray:
    """Every assignment of types to pools [C, pools] (type indices)."""
    k = range(self.n_types)
    return np.asarray(list(itertools.product(k, repeat=len(self.pools))), np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class SizingSpace:
  """A family's layout variables, free pool sizes and type logits.

  Attributes:
    structure: The :class:`SizingStructure`.
    vars: The base space's variables (pools as log2 GPUs), then one logit per
      pool and type (``type.<pool>.<GPU>``).
    base: The family's layout space (on the largest cluster the groups allow).
    types: The GPU types, in the order of the stacked figures.
  """

  structure: SizingStructure
  vars: tuple[space_lib.Var, ...]
  base: space_lib.FamilySpace
  types: tuple[str, ...]

  @property
  def family(self) -> str:
    return self.base.family

  @property
  def n_base(self) -> int:
    return len(self.base.vars)

  def pool_columns(self) -> list[int]:
    return [self.base.index(f"pool.{p}") for p in self.structure.pools]

  def logit_columns(self, pool: str) -> list[int]:
    names = [v.name for v in self.vars]
    return [names.index(f"type.{pool}.{t}") for t in self.types]

  def init_relaxed(self, rng: np.random.Generator, starts: int):
    """Random starts ``x0`` and bounds ``lo, hi``: pool sizes log-uniform over
    their range, type logits normal (sd 1), the layout as the base space's."""
    x0, lo, hi = self.base.init_relaxed(rng, starts)
    cols = self.pool_columns()
    for j in cols:
      opts = self.vars[j].options
      lo[:, j], hi[:, j] = np.log2(opts[0]), np.log2(opts[-1])
      x0[:, j] = rng.uniform(lo[:, j], hi[:, j])
    k = len(self.vars) - self.n_base
    x0 = np.concatenate([x0, rng.normal(size=(starts, k))], 1)
    lo = np.concatenate([lo, np.full((starts, k), -_LOGIT_BOX)], 1)
    hi = np.concatenate([hi, np.full((starts, k), _LOGIT_BOX)], 1)
    return x0, lo, hi

  def relaxed_values(self, x: jax.Array, cluster_gpus=None) -> jax.Array:
    """Parameters -> values: the layout's, pool GPUs ``2^x``, type probabilities
    (the pools are variables of their own: ``cluster_gpus`` is not read)."""
    del cluster_gpus
    v = self.base.relaxed_values(x[:self.n_base], float(self.structure.cluster_gpus))
    cols = jnp.asarray(self.pool_columns())
    v = v.at[cols].set(jnp.exp2(x[cols]))
    probs = [jax.nn.softmax(x[jnp.asarray(self.logit_columns(p))])
             for p in self.structure.pools]
    return jnp.concatenate([v] + probs)

  def type_probabilities(self, values: np.ndarray, share_type: bool) -> dict[str, np.ndarray]:
    """Pool -> the probability of each type (from relaxed values); with
    ``share_type`` every pool reads the first pool's."""
    pools = self.structure.pools
    return {p: np.asarray(values[..., self.logit_columns(pools[0] if share_type else p)])
            for p in pools}

  def relaxed_objective(self, problem: SizingProblem, cluster: cm.Cluster, eff, x, tau,
                        weight):
    """The expected sizing loss of one start and ``(step, penalty)`` (expected)."""
    st = self.structure
    values = self.relaxed_values(x)
    v = values[:self.n_base]
    plan = st.base.to_plan(v)
    gpus = jnp.stack([v[self.base.index(f"pool.{p}")] for p in st.pools])
    layout_pen = space_lib.layout_violation(st.base, v, problem.job, float(st.cluster_gpus))
    combos = jnp.asarray(st.assignments)
    probs = jnp.stack([values[jnp.asarray(self.logit_columns(p))] for p in st.pools])
    pools_at = jnp.arange(len(st.pools))
    own = jnp.prod(probs[pools_at, combos], axis=-1)  # [C]
    # One type for every pool: an assignment weighs its type's probability
    # in the first pool's distribution, and mixed assignments nothing.
    one_type = jnp.all(combos == combos[:, :1], axis=-1)
    shared = jnp.where(one_type, probs[0, combos[:, 0]], 0.0)
    weights = jnp.where(problem.share_type > 0.5, shared, own)
    k = st.n_types

    def one(idx):
      hw = [jax.tree.map(lambda a, i=i: jnp.asarray(a)[i], problem.hardware).replace(name=p)
            for i, p in zip(idx, st.pools, strict=True)]
      pools = tuple(cm.Pool(p.name, p.gpus, hw[j]) for j, p in enumerate(plan.pools))
      with cmi.positive_tau():
        est = cm.estimate(problem.job, plan.replace(pools=pools),
                          cluster.replace(accelerator=hw[-1]), eff, tau=tau)
      used = jnp.zeros((k,)).at[idx].add(gpus)
      over = jnp.sum(jnp.where(used > 0, cmi.smooth_relu(jnp.log2(jnp.maximum(used, 1.0)
                                                             / problem.available_gpus), 1.0,
                                                     tau), 0.0))
      pen = space_lib.memory_excess(st.base, v, est, problem.job, cluster) + layout_pen + over
      step = jnp.maximum(est.step_time_s, 1e-9)
      per_hour = jnp.sum(gpus * jnp.asarray(problem.price_per_gpu_hour)[idx])
      t, b = problem.target_step_s, problem.budget_per_hour
      late = jnp.where(t > 0, cmi.smooth_relu(jnp.log(step / jnp.where(t > 0, t, 1.0)), 1.0, tau),
                       0.0)
      over_budget = jnp.where(b > 0, cmi.smooth_relu(jnp.log(per_hour / jnp.where(b > 0, b, 1.0)),
                                                 1.0, tau), 0.0)
      cheapest = problem.cheapest > 0.5
      miss = jnp.where(cheapest, late, over_budget)
      base = jnp.where(cheapest, jnp.log(per_hour * step / 3600.0), jnp.log(step))
      return base + weight * (pen + miss), step, pen + miss

    loss, step, pen = jax.lax.map(one, combos)
    return jnp.sum(weights * loss), (jnp.sum(weights * step), jnp.sum(weights * pen))


def build(family: str, job: cm.RLJob, types, groups_gpus, gpus_per_node: int,
          share_type: bool) -> SizingSpace | None:
  """The sizing space of ``family`` (None when the family cannot hold the job).

  Args:
    family: A placement family (:data:`search.FAMILIES`).
    job: The RL job.
    types: The GPU types, in the order of the problem's stacked figures.
    groups_gpus: GPUs of each type's group (same order).
    gpus_per_node: GPUs per node.
    share_type: One type for every pool: the layout options are those of the
      largest group's cluster, else of every group's together.
  """
  most = int(max(groups_gpus))
  total = most if share_type else int(sum(groups_gpus))
  # The accelerator only names the cluster the option lists are built on;
  # each assignment puts its own figures on the pools.
  hw = cm.hardware.get(types[0]).replace(name="sized")
  # The pool sizes are replaced below; the layout options come from the
  # largest cluster of whole nodes on which the family holds the job (on
  # 3 nodes, no data-parallel degree of a one-pool family may divide the
  # batch where 2 nodes hold it).
  for nodes in range(max(total // gpus_per_node, 1), 0, -1):
    cluster = cm.Cluster(hw, gpus_per_node=gpus_per_node, nodes=nodes)
    base = space_lib.build(family, job, cluster)
    if base is not None:
      break
  else:
    return None
  node_gpus = gpus_per_node * np.arange(1, most // gpus_per_node + 1, dtype=np.float64)
  vars_ = [space_lib.Var(v.name, LOG2, node_gpus) if v.kind == space_lib.POOL else v
           for v in base.vars]
  for p in base.structure.pools:
    vars_ += [space_lib.Var(f"type.{p}.{t}", TYPE, np.arange(float(len(types))))
              for t in types]
  structure = SizingStructure(base.structure, len(types), int(gpus_per_node),
                              base.cluster.n_gpus)
  return SizingSpace(structure=structure, vars=tuple(vars_), base=base, types=tuple(types))
