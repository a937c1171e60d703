"""The RL step model: the stage graph, costed, made resident, scheduled.

``estimate`` composes four steps, each in its own module:

1. the stage graph of the job's algorithm (:mod:`costmodel._src.step.algorithms`);
2. each stage's cost from its kind's function, on its pool's device
   (:mod:`costmodel._src.stages.registry`);
3. residency: what each role keeps in memory between stages, what it
   offloads, and the switch stage of a colocated rollout pool
   (:mod:`costmodel._src.step.residency`);
4. the schedule: stages on pools' timelines, asynchronous steady state,
   fusion (:mod:`costmodel._src.step.schedule`);

and the metrics turn the result into an :class:`Estimate` (throughput, MFU,
lower bound, memory per stage, feasibility; :mod:`costmodel._src.step.metrics`).
:func:`costmodel.internal.estimate_rows` (:mod:`costmodel._src.rows.estimate`) estimates a
batch of plans with the same functions, each stage costed once per distinct input.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src import pytree
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import plan as plan_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.stages import registry
from costmodel._src.stages.common import StageCost
from costmodel._src.step import algorithms
from costmodel._src.step import metrics
from costmodel._src.step import residency as residency_lib
from costmodel._src.step import schedule as schedule_lib
from costmodel._src.step.result import Estimate


def estimate(job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
             efficiency: Efficiency | None = None, tau=0.0) -> Estimate:
  """Predicts one steady-state RL step of ``job`` laid out as ``plan``.

  Pure and jittable: ``jax.jit(estimate)`` works, ``vmap`` batches plans of
  one structure (same pools, roles, mode) and ``grad`` reaches every leaf
  (layout degrees, pool sizes, hardware figures, efficiency parameters).
  Each stage is timed, and its memory checked, on its pool's accelerator
  (``Pool.accelerator``, the cluster's by default).

  Args:
    job: The RL job.
    plan: Pools, placement, layouts, engines and execution mode.
    cluster: The cluster.
    efficiency: Efficiency parameters (defaults if None).
    tau: Smoothing temperature: 0 for the exact model, > 0 for the relaxed
      one used by the search.

  Returns:
    An :class:`Estimate`.

  Raises:
    TypeError: naming the argument that is not a job, plan, cluster or
      efficiency parameters.
    ValueError: for a concrete plan that cannot run (see
      :func:`costmodel.validate_plan`).
  """
  pytree.check_arguments("estimate", job=(job, RLJob), plan=(plan, plan_lib.Plan),
                         cluster=(cluster, Cluster),
                         efficiency=(efficiency, (Efficiency, type(None))))
  return estimate_shared(job, (plan,), 0, cluster, efficiency, tau)[0]


def _graph(job: RLJob, plan: plan_lib.Plan):
  """The job's stage graph under the plan's mode."""
  graph = algorithms.stage_graph(job)
  if plan.mode.rollout_log_probs:  # the engine returns the old log-probs
    graph = algorithms.without_stage(graph, algorithms.OLD_LOG_PROB)
  return graph


def stage_names(job: RLJob, plan: plan_lib.Plan) -> tuple[str, ...]:
  """The ``stage_names`` of ``estimate(job, plan, ...)``, without costing
  anything (they depend only on the job's algorithm and the plan's structure)."""
  return tuple(st.name for st in residency_lib.placed(_graph(job, plan), plan))


def stage_owners(job: RLJob) -> dict[str, str | None]:
  """Whose layout runs each stage of ``job``'s step graph: ``engine`` for
  generation, the role for an inference or training stage, None for the rest
  (the weight sync, a CPU stage; the colocated switch is not in the graph)."""
  def owner(st):
    if st.kind == algorithms.GENERATE:
      return "engine"
    return st.role if st.kind in (algorithms.INFER, algorithms.TRAIN) else None
  return {st.name: owner(st) for st in algorithms.stage_graph(job)}


def estimate_shared(job: RLJob, plans, which, cluster: Cluster,
                    efficiency: Efficiency | None = None, tau=0.0,
                    stage_costs: dict[str, StageCost] | None = None) -> tuple[Estimate, ...]:
  """Estimates of ``job`` under several plans of which only ``plans[which]`` is
  meant, each stage costed once for the plans that share its inputs' structure.

  A search that scores plans of several placement families in one program
  passes one plan per family and the family of each row as ``which`` (traced):
  a stage whose inputs differ between families only in array values (the pool
  sizes of colocated and split plans) is costed once on the inputs of plan
  ``which``; residency, schedule and metrics, which are cheap, run per plan.
  :func:`estimate` is the case of one plan.

  Args:
    job: The RL job.
    plans: The plans (any placement families).
    which: Index of the plan meant (an integer or a traced integer scalar).
    cluster: The cluster.
    efficiency: Efficiency parameters (defaults if None).
    tau: Smoothing temperature.
    stage_costs: Stage name -> its cost under plan ``which``, costed
      elsewhere (:func:`costmodel.internal.estimate_rows` costs each once per distinct
      input of a batch); None: costed here.

  Returns:
    One :class:`Estimate` per plan; ``[which]`` is ``estimate(job, plans[which],
    ...)``. The others are costed partly on plan ``which``'s inputs (every stage
    they share with it), so only ``[which]`` is to be read.
  """
  eff = efficiency if efficiency is not None else Efficiency()
  graphs, gpus = _prepared(job, plans, cluster)
  costs = [{} for _ in plans]
  for name in dict.fromkeys(st.name for g in graphs for st in g):
    stages = {k: st for k, g in enumerate(graphs) for st in g if st.name == name}
    if stage_costs is not None:
      shared = dict.fromkeys(stages, stage_costs[name])
    else:
      shared = registry.shared_stage_costs(stages, job, tuple(plans), cluster, gpus, eff, tau,
                                           which)
    for k, cost in shared.items():
      costs[k][name] = cost
  out = []
  for plan, graph, cost, g in zip(plans, graphs, costs, gpus, strict=True):
    res = residency_lib.residency(graph, cost, job, plan, cluster, g, eff)
    sched = schedule_lib.schedule(res, plan, tau, mini_batches=job.mini_batches)
    out.append(metrics.assemble(job, plan, cluster, g, res, sched, tau))
  return tuple(out)


def _prepared(job: RLJob, plans, cluster: Cluster):
  """The plans validated: each one's stage graph and pool name -> GPUs."""
  graphs, gpus = [], []
  for plan in plans:
    plan_lib.validate(job, plan, cluster)
    gpus.append({p.name: jnp.asarray(p.gpus, float) for p in plan.pools})
    graphs.append(_graph(job, plan))
  return tuple(graphs), tuple(gpus)


def stage_groups(job: RLJob, plans, which, cluster: Cluster, names=None) -> dict[str, list]:
  """Stage name -> its groups under ``plans`` (of which ``plans[which]`` is
  meant): ``[(members, stage, inputs), ...]`` as
  :func:`costmodel._src.stages.registry.shared_stage_inputs` gives them, for
  every stage of the plans' graphs except the switch (costed in residency), or
  those in ``names``."""
  graphs, gpus = _prepared(job, plans, cluster)
  out = {}
  for name in dict.fromkeys(st.name for g in graphs for st in g):
    if names is None or name in names:
      stages = {k: st for k, g in enumerate(graphs) for st in g if st.name == name}
      out[name] = registry.shared_stage_inputs(stages, job, tuple(plans), cluster, gpus, which)
  return out
