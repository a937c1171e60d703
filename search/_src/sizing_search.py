"""Relaxed cluster sizing: optimise pool sizes and types, round to nodes, score exactly.

For each placement family (colocated, split, one-step-off split), random
starts optimise the relaxed sizing objective (:mod:`search._src.sizing_relax`)
in the layout search's loop (:func:`search._src.relax.run`). Each start is
rounded: every pool to the whole node counts either side of its relaxed size,
its type to the most likely one (and any other above ``type_share``). Each
rounded assignment (types and nodes of the pools) is scored exactly as the
enumeration scores it (:mod:`search._src.mixed`: the fastest of the colocated
or split layout ladders, plus the start's own rounded layout when valid), and
the best assignments are refined by a local search over one node more or less
and another type per pool. The enumeration (:func:`search.size_cluster`,
:func:`search.mixed_cluster`) stays as the check.

Clusters as scored: with one type for every pool (``share_type``), a cluster
of the nodes the pools use, as :func:`search.size_cluster` plans it; with a
type per pool, the cluster of every group, as :func:`search.mixed_cluster`.
"""

from __future__ import annotations

import itertools
import time
from typing import NamedTuple

import numpy as np

import costmodel as cm
from search._src import compile_cache
from search._src import mixed
from search._src import relax
from search._src import sizing
from search._src import sizing_relax

_FAMILY_MODE = {"split": cm.Mode(), "split_async": cm.Mode(staleness=1)}


class RelaxedSizing(NamedTuple):
  """What :func:`relaxed_sizing` found.

  Attributes:
    best: The best option for the goal (None when no rounded assignment fits;
      with a target or budget, the best that meets it, else None).
    options: Every assignment scored exactly, best first.
    relaxed: Family -> its relaxed values [starts, V] (pool GPUs, layout,
      then type probabilities), for inspection.
    assignments: Assignments of types and nodes scored exactly.
    wall_time_s: Seconds the search took (compilation included).
  """

  best: mixed.MixedOption | None
  options: tuple[mixed.MixedOption, ...]
  relaxed: dict
  assignments: int
  wall_time_s: float


class _Ctx(NamedTuple):
  job: cm.RLJob
  prices: dict
  groups: dict
  per: int
  share_type: bool
  modes: tuple
  goal: str
  target_step_s: float | None
  budget_per_hour: float | None


def _cluster(ctx: _Ctx, types, nodes) -> cm.Cluster:
  if ctx.share_type:
    return cm.Cluster(cm.hardware.get(types[0]), gpus_per_node=ctx.per, nodes=int(sum(nodes)))
  priciest = max(ctx.groups, key=lambda g: ctx.prices[g])
  return cm.Cluster(cm.hardware.get(priciest), gpus_per_node=ctx.per,
                    nodes=sum(ctx.groups.values()))


def _fits(ctx: _Ctx, types, nodes) -> bool:
  if min(nodes) < 1 or (ctx.share_type and len(set(types)) > 1):
    return False
  used: dict = {}
  for t, n in zip(types, nodes, strict=True):
    used[t] = used.get(t, 0) + n
  return all(t in ctx.groups and n <= ctx.groups[t] for t, n in used.items())


def _score(ctx: _Ctx, key, extra) -> mixed.MixedOption:
  """The exact option of ``key = (types, nodes)`` (one pool: colocated)."""
  types, nodes = key
  cluster = _cluster(ctx, types, nodes)
  hw = [cm.hardware.get(t) for t in types]
  if len(types) == 1:
    plans = mixed.colocated_plans(ctx.job, cluster, cm.Pool("all", float(nodes[0] * ctx.per),
                                                            hw[0]))
  else:
    plans = mixed.split_plans(ctx.job, cluster, cm.Pool("gen", float(nodes[0] * ctx.per), hw[0]),
                              cm.Pool("train", float(nodes[1] * ctx.per), hw[1]), ctx.modes)
  plans = plans + [p for p in extra if mixed.valid(ctx.job, p, cluster)]
  train = (types[-1], 0) if len(types) == 1 else (types[1], nodes[1])
  return mixed.option(ctx.job, cluster, ctx.prices, types[0], nodes[0], *train, plans, ctx.per)


def _rank(ctx: _Ctx, o: mixed.MixedOption):
  if not o.feasible:
    return (2, np.inf, np.inf)
  if ctx.goal == "cheapest":
    miss = ctx.target_step_s is not None and o.step_time_s > ctx.target_step_s
    return (int(miss), o.cost_per_step, o.step_time_s)
  miss = ctx.budget_per_hour is not None and o.cost_per_hour > ctx.budget_per_hour * (1 + 1e-9)
  return (int(miss), o.step_time_s, o.cost_per_step)


def _rounded(fs: sizing_relax.SizingSpace, values: np.ndarray, per: int, type_share: float,
             share_type: bool):
  """The assignments ``(types, nodes)`` either side of each relaxed start, with
  the start's rounded layout plans (pools filled in when scored)."""
  st = fs.structure
  probs = fs.type_probabilities(values, share_type)
  out: dict = {}
  base = values[:, :fs.n_base]
  near = fs.base.nearest(base)
  for s in range(values.shape[0]):
    per_pool = []
    for p in st.pools:
      pr = probs[p][s]
      likely = [fs.types[i] for i in np.argsort(-pr) if pr[i] >= type_share] or [
          fs.types[int(np.argmax(pr))]]
      n = base[s, fs.base.index(f"pool.{p}")] / per
      counts = sorted({max(int(np.floor(n)), 1), max(int(np.ceil(n)), 1)})
      per_pool.append([(t, c) for t in likely for c in counts])
    for combo in itertools.product(*per_pool):
      types = tuple(t for t, _ in combo)
      nodes = tuple(c for _, c in combo)
      row = near[s].copy()
      for j, p in enumerate(st.pools):
        row[fs.base.index(f"pool.{p}")] = nodes[j] * per
      out.setdefault((types, nodes), []).append(row)
  return out


def _layout_plans(fs, rows, types, per):
  """Plans of the rounded layout rows with the pools on their types."""
  plans = []
  for row in rows:
    try:
      plan = fs.base.to_plan(np.asarray(row, np.float64))
    except ValueError:
      continue
    plans.append(plan.replace(pools=tuple(cm.Pool(p.name, p.gpus, cm.hardware.get(t))
                                          for p, t in zip(plan.pools, types, strict=True))))
  return plans


def _neighbours(ctx: _Ctx, key):
  types, nodes = key
  out = []
  for j in range(len(nodes)):
    for d in (-1, 1):
      n = list(nodes)
      n[j] += d
      out.append((types, tuple(n)))
    for t in ctx.groups:
      if t != types[j]:
        ts = tuple(t if ctx.share_type else (t if i == j else types[i])
                   for i in range(len(types)))
        out.append((ts, nodes))
  return [k for k in out if _fits(ctx, *k)]


def _check(name, value, rule_ok, rule):
  if value is not None and not rule_ok(value):
    raise ValueError(f"relaxed_sizing: {name}={value!r} must {rule}")


def relaxed_sizing(job: cm.RLJob, prices: dict, groups: dict | None = None, nodes: int = 8,
                   gpus_per_node: int = 8, share_type: bool = True, goal: str = "cheapest",
                   target_step_s: float | None = None,
                   target_samples_per_s: float | None = None,
                   budget_per_hour: float | None = None, modes=mixed.MODES, starts: int = 8,
                   steps: int = 120, seed: int = 0, type_share: float = 0.25,
                   refine_rounds: int = 6, efficiency: cm.Efficiency | None = None,
                   compilation_cache: str | bool | None = None) -> RelaxedSizing:
  """Sizes the cluster by gradient: pool sizes and types relaxed, then rounded.

  Args:
    job: The RL job.
    prices: Price per GPU-hour by accelerator preset (:func:`search.load_prices`).
    groups: GPU type -> nodes available (default: ``nodes`` of every priced type).
    nodes: Nodes available per type when ``groups`` is None.
    gpus_per_node: GPUs per node.
    share_type: One GPU type for the whole cluster (as :func:`search.size_cluster`);
      False: each pool picks its type (as :func:`search.mixed_cluster`).
    goal: ``cheapest`` (lowest cost per step meeting ``target_step_s`` /
      ``target_samples_per_s``, if given) or ``fastest`` (lowest step time within
      ``budget_per_hour``, if given).
    target_step_s: Longest acceptable step time.
    target_samples_per_s: Lowest acceptable throughput.
    budget_per_hour: Highest acceptable cluster price per hour.
    modes: Execution modes of the split plans (synchronous and one-step-off).
    starts: Random starts per family.
    steps: Relaxed optimisation steps.
    seed: Random seed.
    type_share: Types at least this likely in a relaxed start are rounded to as well.
    refine_rounds: Rounds of the exact local search after rounding.
    efficiency: Efficiency parameters (defaults if None).
    compilation_cache: The persistent JAX compilation cache (as
      :func:`search.optimize`: None for the default folder, False: off).

  Returns:
    A :class:`RelaxedSizing`.
  """
  t0 = time.perf_counter()
  prices = sizing.check_prices(prices)
  if goal not in sizing_relax.GOALS:
    raise ValueError(f"relaxed_sizing: goal={goal!r} is not one of {sizing_relax.GOALS}")
  whole = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)
  _check("nodes", nodes, lambda v: whole(v) and v >= 1, "be a whole node count >= 1")
  _check("gpus_per_node", gpus_per_node, lambda v: whole(v) and v >= 1, "be an integer >= 1")
  for name, v in (("starts", starts), ("steps", steps)):
    _check(name, v, lambda v: whole(v) and v >= 1, "be an integer >= 1")
  _check("refine_rounds", refine_rounds, lambda v: whole(v) and v >= 0, "be an integer >= 0")
  _check("type_share", type_share, lambda v: 0 < v <= 1, "lie in (0, 1]")
  for name, v in (("target_step_s", target_step_s), ("target_samples_per_s",
                                                     target_samples_per_s),
                  ("budget_per_hour", budget_per_hour)):
    _check(name, v, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
           and np.isfinite(v) and v > 0, "be a finite number > 0")
  groups = dict(groups) if groups is not None else {g: nodes for g in prices}
  for gpu, n in groups.items():
    if gpu not in prices:
      raise ValueError(f"relaxed_sizing: groups[{gpu!r}] has no price in prices")
    _check(f"groups[{gpu!r}]", n, lambda v: whole(v) and v >= 1, "be a whole node count >= 1")
  if not modes:
    raise ValueError("relaxed_sizing: modes is empty")
  target = target_step_s
  if target_samples_per_s is not None:
    rate_step = float(job.samples_per_step) / target_samples_per_s
    target = rate_step if target is None else min(target, rate_step)
  types = tuple(groups)
  ctx = _Ctx(job, prices, groups, gpus_per_node, bool(share_type), tuple(modes), goal, target,
             budget_per_hour)
  problem = sizing_relax.SizingProblem(
      job=job, hardware=sizing_relax.stack_hardware(types),
      price_per_gpu_hour=np.asarray([prices[t] for t in types], np.float32),
      available_gpus=np.asarray([groups[t] * gpus_per_node for t in types], np.float32),
      target_step_s=np.float32(target or 0.0), budget_per_hour=np.float32(budget_per_hour or 0.0),
      cheapest=np.float32(goal == "cheapest"), share_type=np.float32(bool(share_type)))
  compile_cache.enable(compilation_cache)
  fams = ["colocated"] + [f for f, m in _FAMILY_MODE.items() if m in tuple(modes)]
  eff = efficiency if efficiency is not None else cm.Efficiency()
  cfg = relax.RelaxConfig(steps=int(steps))
  groups_gpus = [groups[t] * gpus_per_node for t in types]
  relaxed, found = {}, {}
  for k, fam in enumerate(fams):
    fs = sizing_relax.build(fam, job, types, groups_gpus, gpus_per_node, share_type)
    if fs is None:
      continue
    rng = np.random.default_rng([seed, k])
    x0, lo, hi = fs.init_relaxed(rng, starts)
    out = relax.run(fs, problem, fs.base.cluster, eff, x0, lo, hi, cfg)
    relaxed[fam] = out.values
    for key, rows in _rounded(fs, out.values, gpus_per_node, type_share, share_type).items():
      if _fits(ctx, *key):
        found.setdefault(key, []).extend(_layout_plans(fs, rows, key[0], gpus_per_node))
  scored = {key: _score(ctx, key, plans) for key, plans in found.items()}
  for _ in range(refine_rounds):
    top = sorted(scored, key=lambda k: _rank(ctx, scored[k]))[:2]
    new = {k for t in top for k in _neighbours(ctx, t) if k not in scored}
    if not new:
      break
    for key in new:
      scored[key] = _score(ctx, key, [])
    if sorted(scored, key=lambda k: _rank(ctx, scored[k]))[:2] == top:
      break
  options = tuple(sorted(scored.values(), key=lambda o: _rank(ctx, o)))
  best = options[0] if options and _rank(ctx, options[0])[0] == 0 else None
  return RelaxedSizing(best, options, relaxed, len(scored), time.perf_counter() - t0)


def as_cluster_option(o: mixed.MixedOption, job: cm.RLJob) -> sizing.ClusterOption:
  """``o`` as a :class:`~search._src.sizing.ClusterOption` (for
  :func:`search.pareto`, the table and the plot): labelled by its GPU type,
  ``<rollout>+<training>`` for a mixed one, and for a split its nodes per pool
  (``H20 1+2``); its nodes are every node it uses."""
  gpu = o.gen_gpu if o.gen_gpu == o.train_gpu else f"{o.gen_gpu}+{o.train_gpu}"
  if not o.colocated:
    gpu = f"{gpu} {o.gen_nodes}+{o.train_nodes}"
  nodes = o.gen_nodes + o.train_nodes
  gpus = sum(int(p.gpus) for p in o.plan.pools) if o.plan is not None else 0
  price = o.cost_per_hour / gpus if gpus else 0.0
  if not o.feasible:
    inf = float("inf")
    return sizing.ClusterOption(gpu, nodes, gpus, price, False, inf, 0.0, o.cost_per_hour, inf,
                                inf, None, None, None)
  family = "colocated" if o.colocated else f"split {o.plan.mode.name}"
  return sizing.ClusterOption(gpu, nodes, gpus, price, True, o.step_time_s,
                              float(o.estimate.samples_per_s), o.cost_per_hour, o.cost_per_step,
                              o.cost_per_step / float(job.samples_per_step), o.plan, o.estimate,
                              family)


def relaxed_front(job: cm.RLJob, prices: dict, targets_s, **kwargs):
  """The cheapest option meeting each target step time, and their Pareto front.

  Args:
    job: The RL job.
    prices: Price per GPU-hour by type.
    targets_s: Target step times to sweep (> 0).
    **kwargs: Passed to :func:`relaxed_sizing` (not ``goal`` or ``target_step_s``).

  Returns:
    ``(pairs, front)``: ``(target, RelaxedSizing)`` per target, loosest first,
    and :func:`search.pareto` of the best options found.
  """
  targets = sorted((float(t) for t in targets_s), reverse=True)
  if not targets or any(not t > 0 for t in targets):
    raise ValueError(f"relaxed_front: targets_s={tuple(targets_s)!r} must be step times > 0")
  pairs = [(t, relaxed_sizing(job, prices, goal="cheapest", target_step_s=t, **kwargs))
           for t in targets]
  bests = [r.best for _, r in pairs if r.best is not None]
  return pairs, sizing.pareto(bests)
