"""Sizing the cluster by cost: which GPU type, how many nodes.

Prices are inputs (dollars, or any currency, per GPU-hour per accelerator
preset): the library holds none. ``examples/prices.yaml`` is an example file
of the format, with made-up round numbers.

For every candidate cluster (a GPU type and a whole number of nodes) a
planner finds a layout: ``search.optimize`` at coarse settings by default,
or the best of the rules of thumb (``planner="rules"``, no search), or any
callable ``(job, cluster) -> SearchResult``. Each option's cost per step is
``price x GPUs x step time / 3600`` and its cost per sample that over the
samples of a step. :func:`pareto` keeps the options no other option beats
on both cost and step time; :func:`size_cluster` picks the cheapest option
that meets a target step time or throughput, and the fastest one under a
budget per hour. :func:`search.relaxed_sizing` searches pool sizes and GPU
types by gradient instead (:mod:`search._src.sizing_search`); this
enumeration is its check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import yaml

import costmodel as cm
from search._src import optimize as optimize_lib
from search._src import rules as rules_lib
from search._src.result import SearchResult

COSTS = ("cost_per_step", "cost_per_sample")


class ClusterOption(NamedTuple):
  """One candidate cluster with its best plan found and what it costs."""

  gpu: str
  nodes: int
  gpus: int
  price_per_gpu_hour: float
  feasible: bool
  step_time_s: float
  samples_per_s: float
  cost_per_hour: float
  cost_per_step: float
  cost_per_sample: float
  plan: cm.Plan | None
  estimate: cm.Estimate | None
  family: str | None


class SizingResult(NamedTuple):
  """What :func:`size_cluster` found.

  Attributes:
    cheapest: The cheapest feasible option (per step) that meets the target
      (None when none does); without a target, the cheapest feasible one.
    fastest: The fastest feasible option within ``budget_per_hour`` (None
      when none fits the budget); without a budget, the fastest one.
    front: The Pareto front of step time against cost per step.
    options: Every option evaluated.
  """

  cheapest: ClusterOption | None
  fastest: ClusterOption | None
  front: tuple[ClusterOption, ...]
  options: tuple[ClusterOption, ...]

  def table(self) -> str:
    """The options as a table, one line each, the Pareto front marked ``*``."""
    return format_options(self.options, self.front)


def load_prices(path: str) -> dict[str, float]:
  """Prices per GPU-hour from a YAML file: ``prices: {H100: 2.5, ...}``."""
  with open(path, encoding="utf-8") as f:
    data = yaml.safe_load(f)
  if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
    raise ValueError(f"load_prices: {path!r} must hold a mapping 'prices: {{GPU: price}}'")
  return check_prices(data["prices"])


def check_prices(prices: dict) -> dict[str, float]:
  """Validates ``{accelerator preset: price per GPU-hour}``."""
  if not prices:
    raise ValueError("prices: no GPU type given")
  out = {}
  for gpu, price in prices.items():
    cm.hardware.get(gpu)  # raises ValueError naming an unknown preset
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not price > 0:
      raise ValueError(f"prices: {gpu}={price!r} must be a number > 0 per GPU-hour")
    out[str(gpu)] = float(price)
  return out


def rules_planner(job: cm.RLJob, cluster: cm.Cluster) -> SearchResult:
  """The fastest feasible rule-of-thumb plan (no search)."""
  results = [r for r in rules_lib.rules_of_thumb(job, cluster) if r.feasible]
  if not results:
    return SearchResult(method="rules", infeasible_reason="no rule of thumb fits")
  return min(results, key=lambda r: float(r.best_estimate.step_time_s))


def optimize_planner(starts: int = 4, steps: int = 40, families=None) -> Callable:
  """``search.optimize`` at coarse settings, as a planner."""
  def plan(job, cluster):
    return optimize_lib.optimize(job, cluster, families=families, starts=starts, steps=steps,
                                 top_k=1)
  return plan


def _planner(planner) -> Callable:
  if planner == "optimize":
    return optimize_planner()
  if planner == "rules":
    return rules_planner
  if callable(planner):
    return planner
  raise ValueError(f"planner={planner!r} must be 'optimize', 'rules' or a callable")


def option(job: cm.RLJob, gpu: str, nodes: int, price: float, result: SearchResult,
           gpus_per_node: int = 8) -> ClusterOption:
  """A :class:`ClusterOption` from a planner's result."""
  gpus = nodes * gpus_per_node
  per_hour = price * gpus
  est = result.best_estimate
  if est is None or not result.feasible:
    inf = float("inf")
    return ClusterOption(gpu, nodes, gpus, price, False, inf, 0.0, per_hour, inf, inf, None,
                         None, None)
  step = float(est.step_time_s)
  per_step = per_hour * step / 3600.0
  return ClusterOption(gpu, nodes, gpus, price, True, step, float(est.samples_per_s), per_hour,
                       per_step, per_step / float(job.samples_per_step), result.best_plan, est,
                       result.family)


def evaluate_clusters(job: cm.RLJob, prices: dict, nodes=(1, 2, 4, 8), gpus_per_node: int = 8,
                      planner="optimize") -> tuple[ClusterOption, ...]:
  """Plans ``job`` on every GPU type of ``prices`` and node count of ``nodes``."""
  prices = check_prices(prices)
  nodes = tuple(nodes)
  if not nodes or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in nodes):
    raise ValueError(f"nodes={nodes!r} must be whole node counts >= 1")
  plan = _planner(planner)
  out = []
  for gpu, price in prices.items():
    for n in nodes:
      cluster = cm.Cluster(cm.hardware.get(gpu), gpus_per_node=gpus_per_node, nodes=n)
      out.append(option(job, gpu, n, price, plan(job, cluster), gpus_per_node))
  return tuple(out)


def pareto(options, cost: str = "cost_per_step") -> tuple[ClusterOption, ...]:
  """The feasible options no other beats on both ``cost`` and step time,
  cheapest first (so step time falls strictly along the front)."""
  if cost not in COSTS:
    raise ValueError(f"pareto: cost={cost!r} is not one of {COSTS}")
  ok = sorted((o for o in options if o.feasible),
              key=lambda o: (getattr(o, cost), o.step_time_s))
  front, best = [], np.inf
  for o in ok:
    if o.step_time_s < best:
      front.append(o)
      best = o.step_time_s
  return tuple(front)


def size_cluster(job: cm.RLJob, prices: dict | None = None, nodes=(1, 2, 4, 8),
                 gpus_per_node: int = 8, target_step_s: float | None = None,
                 target_samples_per_s: float | None = None,
                 budget_per_hour: float | None = None, planner="optimize",
                 options=None) -> SizingResult:
  """The cheapest cluster meeting a target and the fastest under a budget.

  Args:
    job: The RL job.
    prices: Price per GPU-hour by accelerator preset (see :func:`load_prices`).
    nodes: Node counts to try (whole nodes).
    gpus_per_node: GPUs per node.
    target_step_s: Longest acceptable step time.
    target_samples_per_s: Lowest acceptable throughput.
    budget_per_hour: Highest acceptable cluster price per hour.
    planner: ``optimize``, ``rules`` or a callable ``(job, cluster) -> SearchResult``.
    options: Options already evaluated (skips the planning).
  """
  for name, v in (("target_step_s", target_step_s),
                  ("target_samples_per_s", target_samples_per_s),
                  ("budget_per_hour", budget_per_hour)):
    if v is not None and not (isinstance(v, (int, float)) and v > 0):
      raise ValueError(f"size_cluster: {name}={v!r} must be a number > 0")
  if options is None:
    if prices is None:
      raise ValueError("size_cluster: prices are needed unless options are given")
    options = evaluate_clusters(job, prices, nodes, gpus_per_node, planner)
  options = tuple(options)
  ok = [o for o in options if o.feasible]

  def meets(o):
    return ((target_step_s is None or o.step_time_s <= target_step_s)
            and (target_samples_per_s is None or o.samples_per_s >= target_samples_per_s))

  meeting = [o for o in ok if meets(o)]
  within = [o for o in ok if budget_per_hour is None or o.cost_per_hour <= budget_per_hour]
  cheapest = min(meeting, key=lambda o: (o.cost_per_step, o.step_time_s)) if meeting else None
  fastest = min(within, key=lambda o: (o.step_time_s, o.cost_per_step)) if within else None
  return SizingResult(cheapest, fastest, pareto(options), options)


def format_options(options, front=()) -> str:
  """A table of the options, the Pareto front marked with ``*``."""
  on_front = {(o.gpu, o.nodes) for o in front}
  lines = [f"{'':2}{'gpu':<11}{'nodes':>6}{'gpus':>6}{'step s':>10}{'samples/s':>11}"
           f"{'$/h':>10}{'$/step':>10}{'$/1k samples':>14}"]
  for o in sorted(options, key=lambda o: (o.gpu, o.nodes)):
    mark = "* " if (o.gpu, o.nodes) in on_front else "  "
    if not o.feasible:
      lines.append(f"{mark}{o.gpu:<11}{o.nodes:>6}{o.gpus:>6}{'no fit':>10}")
      continue
    lines.append(f"{mark}{o.gpu:<11}{o.nodes:>6}{o.gpus:>6}{o.step_time_s:>10.1f}"
                 f"{o.samples_per_s:>11.2f}{o.cost_per_hour:>10.2f}{o.cost_per_step:>10.3f}"
                 f"{1000 * o.cost_per_sample:>14.3f}")
  return "\n".join(lines)


def plot_pareto(options, path: str | None = None, cost: str = "cost_per_step"):
  """Step time against cost, one colour per GPU type, the front as a line.

  Returns the matplotlib figure (also written to ``path`` when given).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  if path is not None:
    matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4))
  ok = [o for o in options if o.feasible]
  for gpu in sorted({o.gpu for o in ok}):
    pts = [o for o in ok if o.gpu == gpu]
    ax.scatter([getattr(o, cost) for o in pts], [o.step_time_s for o in pts], label=gpu)
    for o in pts:
      ax.annotate(f"{o.gpus}", (getattr(o, cost), o.step_time_s), fontsize=7)
  front = pareto(options, cost)
  ax.plot([getattr(o, cost) for o in front], [o.step_time_s for o in front], "k--",
          label="Pareto front")
  ax.set_xlabel(cost.replace("_", " "))
  ax.set_ylabel("step time (s)")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.legend()
  fig.tight_layout()
  if path is not None:
    fig.savefig(path)
  return fig
