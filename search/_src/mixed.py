"""Mixed GPU types: which role runs on which type, and how many of each.

A cluster of node groups of different accelerators (``{"H800": 8, "H20":
16}`` nodes). Every assignment of the rollout pool and the training pool to
a type and a whole number of that type's nodes is laid out (a small ladder
of engine and training layouts, synchronous and one-step-off modes) and
estimated exactly, each stage on its pool's GPU, the weight sync at the
slower side's NICs (:func:`costmodel.estimate`). The cheapest option per
step is compared with

* the rule of thumb "train on the fast GPUs, generate on the cheap ones":
  every node of the most expensive type trains, every node of the cheapest
  generates;
* the single-type optimum: the best colocated or split plan on one type's
  nodes alone.

Prices are inputs (see :mod:`search._src.sizing`).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax
import numpy as np

import costmodel as cm
from search._src import compile_cache
from search._src import sizing
from search._src.result import SearchResult

# Each ladder plan is estimated once or twice, one compilation per plan
# structure (pools' GPU types, mode, engine): the options that compile fast.
_ESTIMATE = jax.jit(cm.estimate, compiler_options=compile_cache.FAST_COMPILE)
ENGINE_TPS = (1, 2, 4, 8)
MODES = (cm.Mode(), cm.Mode(staleness=1))


def train_layouts(job: cm.RLJob) -> tuple[cm.Parallel, ...]:
  """The training ladder: FSDP with full recompute, then Megatron TP 2, 4, 8."""
  del job
  return (cm.Parallel(micro_batch=2.0, zero_stage=3.0, recompute=2.0),
          cm.Parallel(tp=2.0, micro_batch=1.0, zero_stage=1.0, recompute=2.0),
          cm.Parallel(tp=4.0, micro_batch=1.0, zero_stage=1.0, recompute=2.0),
          cm.Parallel(tp=8.0, micro_batch=1.0, zero_stage=1.0, recompute=2.0))


def valid(job, plan, cluster) -> bool:
  """Whether ``plan`` passes :func:`costmodel.validate_plan` on ``cluster``."""
  try:
    cm.validate_plan(job, plan, cluster)
  except ValueError:
    return False
  return True


def split_plans(job: cm.RLJob, cluster: cm.Cluster, gen: cm.Pool, train: cm.Pool,
                modes=MODES):
  """Valid split plans with the rollout pool ``gen`` and the training pool ``train``."""
  out = []
  for tp, layout, mode in itertools.product(ENGINE_TPS, train_layouts(job), modes):
    engine = cm.Engine(tp=float(tp), memory_fraction=0.85)
    try:
      plan = cm.build_plan("split", job, {"gen": float(gen.gpus), "train": float(train.gpus)},
                           engine, {"actor": layout, "critic": layout}, {}, mode=mode)
    except ValueError:
      continue
    plan = plan.replace(pools=(cm.Pool("gen", float(gen.gpus), gen.accelerator),
                               cm.Pool("train", float(train.gpus), train.accelerator)))
    if valid(job, plan, cluster):
      out.append(plan)
  return out


def colocated_plans(job: cm.RLJob, cluster: cm.Cluster, pool: cm.Pool):
  """Valid colocated plans of every role on ``pool``."""
  out = []
  for tp, layout in itertools.product(ENGINE_TPS, train_layouts(job)):
    engine = cm.Engine(tp=float(tp), memory_fraction=0.5)
    try:
      plan = cm.build_plan("colocated", job, {"all": float(pool.gpus)}, engine,
                           {"actor": layout, "critic": layout}, {})
    except ValueError:
      continue
    plan = plan.replace(pools=(cm.Pool("all", float(pool.gpus), pool.accelerator),))
    if valid(job, plan, cluster):
      out.append(plan)
  return out


def best_plan(job: cm.RLJob, cluster: cm.Cluster, plans, efficiency=None):
  """``(plan, estimate)`` of the fastest feasible plan of ``plans`` (None, None
  when none fits), each estimated exactly (jitted once per plan structure)."""
  eff = efficiency if efficiency is not None else cm.Efficiency()
  best, best_t = (None, None), np.inf
  for plan in plans:
    est = _ESTIMATE(job, plan, cluster, eff)
    t = float(est.step_time_s)
    if bool(est.feasible) and t < best_t:
      best, best_t = (plan, est), t
  return best


LADDERS = ("colocated", "split")


def layouts_planner(job: cm.RLJob, cluster: cm.Cluster, modes=MODES,
                    families=LADDERS) -> SearchResult:
  """A planner for :func:`search.size_cluster`: the fastest plan of the
  colocated and split ladders on a one-type cluster (no search).

  Args:
    job: The RL job.
    cluster: A one-type cluster.
    modes: The execution modes of the split plans.
    families: The ladders to climb, a non-empty subset of ``("colocated",
      "split")`` (``functools.partial(layouts_planner, families=("colocated",))``
      sizes a colocated cluster).
  """
  families = tuple(families)
  if not families or any(f not in LADDERS for f in families):
    raise ValueError(f"layouts_planner: families={families!r} must be a non-empty subset of "
                     f"{LADDERS}")
  hw = cluster.accelerator
  n, per = cluster.n_gpus, cluster.gpus_per_node
  plans = []
  if "colocated" in families:
    plans += colocated_plans(job, cluster, cm.Pool("all", float(n), hw))
  if "split" in families:
    for g in range(per, n, per):
      plans += split_plans(job, cluster, cm.Pool("gen", float(g), hw),
                           cm.Pool("train", float(n - g), hw), modes)
  plan, est = best_plan(job, cluster, plans)
  if plan is None:
    return SearchResult(method="layouts", infeasible_reason=(
        f"no layout of the {' or '.join(families)} ladder fits"))
  family = "colocated" if len(plan.pools) == 1 else "split"
  return SearchResult(method="layouts", best_plan=plan, best_estimate=cm.estimate(
      job, plan, cluster), family=family, top=((plan, est),), top_families=(family,))


class MixedOption(NamedTuple):
  """One assignment of pools to GPU types, with its best plan."""

  gen_gpu: str
  gen_nodes: int
  train_gpu: str
  train_nodes: int
  cost_per_hour: float
  step_time_s: float
  cost_per_step: float
  plan: cm.Plan | None
  estimate: cm.Estimate | None

  @property
  def feasible(self) -> bool:
    return self.plan is not None

  @property
  def colocated(self) -> bool:
    return self.train_nodes == 0


class MixedResult(NamedTuple):
  """What :func:`mixed_cluster` found (options cheapest per step first).

  Attributes:
    best: The cheapest feasible option per step, any assignment.
    rule_of_thumb: Train on every node of the priciest type, generate on
      every node of the cheapest.
    single_type: GPU type -> its cheapest single-type option.
    options: Every option, cheapest per step first.
  """

  best: MixedOption | None
  rule_of_thumb: MixedOption | None
  single_type: dict
  options: tuple[MixedOption, ...]

  def table(self, top: int = 5) -> str:
    """The ``top`` cheapest options, the rule of thumb and each single-type
    optimum, one line each."""
    return format_mixed(self, top)


def option(job, cluster, prices, gen, gen_nodes, train, train_nodes, plans, per_node):
  """The :class:`MixedOption` of the fastest feasible plan of ``plans``."""
  plan, est = best_plan(job, cluster, plans)
  per_hour = per_node * (prices[gen] * gen_nodes + prices[train] * train_nodes)
  if plan is None:
    return MixedOption(gen, gen_nodes, train, train_nodes, per_hour, np.inf, np.inf, None, None)
  t = float(est.step_time_s)
  return MixedOption(gen, gen_nodes, train, train_nodes, per_hour, t, per_hour * t / 3600.0,
                     plan, est)


def mixed_cluster(job: cm.RLJob, groups: dict, prices: dict, gpus_per_node: int = 8,
                  modes=MODES) -> MixedResult:
  """Assigns the rollout and training pools to GPU types and node counts.

  Args:
    job: The RL job.
    groups: GPU type (accelerator preset) -> nodes of that type available.
    prices: GPU type -> price per GPU-hour (every type of ``groups``).
    gpus_per_node: GPUs per node of every group.
    modes: Execution modes tried for the split plans (synchronous and
      one-step-off by default).

  Returns:
    A :class:`MixedResult`.
  """
  prices = sizing.check_prices(prices)
  if not groups:
    raise ValueError("mixed_cluster: groups is empty")
  for gpu, n in groups.items():
    if gpu not in prices:
      raise ValueError(f"mixed_cluster: GPU type {gpu!r} of groups has no price")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
      raise ValueError(f"mixed_cluster: groups[{gpu!r}]={n!r} must be a whole node count >= 1")
  hw = {g: cm.hardware.get(g) for g in groups}
  priciest = max(groups, key=lambda g: prices[g])
  # One cluster object for every option: pools carry their own GPUs; its
  # accelerator is the priciest type (the training pools' default).
  cluster = cm.Cluster(hw[priciest], gpus_per_node=gpus_per_node,
                       nodes=sum(groups.values()))
  per = gpus_per_node
  options = []
  for gen, train in itertools.product(groups, groups):
    for gn in range(1, groups[gen] + 1):
      for tn in range(1, groups[train] + 1):
        if gen == train and gn + tn > groups[gen]:
          continue
        plans = split_plans(job, cluster, cm.Pool("gen", float(gn * per), hw[gen]),
                            cm.Pool("train", float(tn * per), hw[train]), modes)
        options.append(option(job, cluster, prices, gen, gn, train, tn, plans, per))
  for gpu in groups:
    for n in range(1, groups[gpu] + 1):
      plans = colocated_plans(job, cluster, cm.Pool("all", float(n * per), hw[gpu]))
      options.append(option(job, cluster, prices, gpu, n, gpu, 0, plans, per))
  options.sort(key=lambda o: (o.cost_per_step, o.step_time_s))
  ok = [o for o in options if o.feasible]
  cheapest = min(groups, key=lambda g: prices[g])
  rule = next((o for o in options if o.gen_gpu == cheapest and o.train_gpu == priciest
               and o.gen_nodes == groups[cheapest] and o.train_nodes == groups[priciest]
               and cheapest != priciest), None)
  single = {g: next((o for o in ok if o.gen_gpu == g and o.train_gpu == g), None)
            for g in groups}
  return MixedResult(ok[0] if ok else None, rule, single, tuple(options))


def format_mixed(result: MixedResult, top: int = 5) -> str:
  """The cheapest options, the rule of thumb and each single-type optimum."""
  def row(tag, o):
    if o is None:
      return f"{tag:<22} none fits"
    where = (f"all on {o.gen_nodes} x {o.gen_gpu}" if o.colocated else
             f"gen {o.gen_nodes} x {o.gen_gpu}, train {o.train_nodes} x {o.train_gpu}")
    if not o.feasible:
      return f"{tag:<22} {where:<36} no fit"
    return (f"{tag:<22} {where:<36} step {o.step_time_s:8.1f} s  {o.cost_per_hour:8.2f}/h  "
            f"{o.cost_per_step:8.3f}/step  mode {o.plan.mode.name}")
  lines = [row(f"#{i + 1}", o) for i, o in enumerate(
      [o for o in result.options if o.feasible][:top])]
  lines.append(row("rule of thumb", result.rule_of_thumb))
  lines += [row(f"single type {g}", o) for g, o in result.single_type.items()]
  return "\n".join(lines)
