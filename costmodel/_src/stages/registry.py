"""One cost function per stage kind, behind one interface.

Every stage kind of :mod:`costmodel._src.step.algorithms` maps to a
:data:`StageFn`::

    fn(model, layout, device, job, eff, tau, ctx) -> StageCost

``model`` is the architecture the stage runs, ``layout`` its layout (the
rollout engines for generation and the switch, the role's training or
inference layout otherwise), ``device`` the accelerator of the stage's pool,
``job`` the RL job, ``eff`` the efficiency parameters, ``tau`` the smoothing
temperature and ``ctx`` a :class:`StageContext` with what only some kinds
need. :func:`stage_inputs` reads those inputs from a plan; a new stage kind is
a function here and an entry in :data:`STAGE_FUNCTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import plan as plan_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.hardware import Hardware
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import agentic
from costmodel._src.stages import common
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import lora_stages
from costmodel._src.stages import sync as sync_lib
from costmodel._src.stages import train as train_lib
from costmodel._src.step import algorithms as alg


class StageContext(NamedTuple):
  """What a stage needs beyond its model, layout, device, job and efficiency.

  Attributes:
    cluster: The cluster (scale-up domain, CPU cores).
    pool_gpus: GPUs of the stage's pool.
    lm_head: The stage computes the vocabulary head (policy log-probs).
    engine: The rollout engines (the weight sync's target).
    peer_gpus: GPUs of the rollout pool (the weight sync's target).
    peer_device: The rollout pool's accelerator (the weight sync's target).
    colocated: Training shares the rollout pool (the weight sync).
    resident_bytes: Training bytes per GPU kept beside the engine (the switch).
    offload_bytes: Training bytes per GPU moved to the host and back (the switch).
    role: The stage's role (None for generation, the switch and CPU stages).
    with_actor: A scoring stage whose pool also holds the actor (a LoRA reference
      shares its frozen base).
    calls: Calls into the trainer per step (a training stage; more than one
      when the trainer streams, ``Mode.require_batches``).
    controller: Batches move through a single controller
      (``Mode.single_controller``).
  """

  cluster: Cluster
  pool_gpus: Any = 0.0
  lm_head: bool = False
  engine: Engine | None = None
  peer_gpus: Any = 0.0
  peer_device: Hardware | None = None
  colocated: bool = False
  resident_bytes: Any = 0.0
  offload_bytes: Any = 0.0
  role: str | None = None
  with_actor: bool = False
  calls: float = 1.0
  controller: bool = True


StageFn = Callable[[ModelSpec, Any, Hardware, RLJob, Efficiency, Any, StageContext],
                   common.StageCost]


def on_device(cluster: Cluster, device: Hardware) -> Cluster:
  """``cluster`` seen from one pool: its accelerator is the pool's."""
  return cluster if device is cluster.accelerator else cluster.replace(accelerator=device)


def _generate(model, layout, device, job, eff, tau, ctx):
  if job.multi_turn is not None:
    return agentic.generate(model, job, layout, ctx.pool_gpus, on_device(ctx.cluster, device),
                            eff, tau, controller=ctx.controller)
  return gen_lib.generate(model, job, layout, ctx.pool_gpus, on_device(ctx.cluster, device),
                          eff, tau, controller=ctx.controller)


def _infer(model, layout, device, job, eff, tau, ctx):
  cost = infer_lib.infer(model, job, layout, ctx.pool_gpus, on_device(ctx.cluster, device),
                         eff, tau, lm_head=ctx.lm_head, controller=ctx.controller,
                         entropy=ctx.role != "reference")
  if (job.lora is not None and job.lora.shared_reference and ctx.role == "reference"
      and ctx.with_actor):
    return lora_stages.shared_reference(cost)
  return cost


def _train(model, layout, device, job, eff, tau, ctx):
  if job.lora is not None and ctx.role == "actor":
    return lora_stages.train(model, job, layout, ctx.pool_gpus,
                             on_device(ctx.cluster, device), eff, tau, lm_head=ctx.lm_head,
                             calls=ctx.calls, controller=ctx.controller)
  return train_lib.train(model, job, layout, ctx.pool_gpus, on_device(ctx.cluster, device),
                         eff, tau, lm_head=ctx.lm_head, calls=ctx.calls,
                         controller=ctx.controller)


def _sync(model, layout, device, job, eff, tau, ctx):
  peer = None if ctx.peer_device is device else ctx.peer_device
  cost = sync_lib.weight_sync(model, job, layout, ctx.pool_gpus, ctx.engine, ctx.peer_gpus,
                              ctx.colocated, on_device(ctx.cluster, device), eff, tau,
                              gen_device=peer)
  return cost if job.lora is None else lora_stages.weight_sync(model, job, cost, eff)


def _switch(model, layout, device, job, eff, tau, ctx):
  del tau  # the switch has no discrete step
  return sync_lib.switch(model, job, layout, ctx.resident_bytes, ctx.offload_bytes,
                         on_device(ctx.cluster, device), eff)


def _cpu(model, layout, device, job, eff, tau, ctx):
  """Rule-based reward scoring: in the controller's one process under a single
  controller (veRL's driver loops over the samples, verl/workers/reward_manager/
  dapo.py @b178a3c), else spread over the cluster's CPU cores."""
  del model, layout, device, eff, tau
  cores = 1 if ctx.controller else ctx.cluster.cpu_cores
  t = job.samples_per_step * job.reward_cpu_s_per_sample / cores
  z = jnp.zeros(())
  return common.make_cost(t, z, z, z, z, z, job.reward_cpu_s_per_sample, z,
                          common.Memory.zeros())


STAGE_FUNCTIONS: dict[str, StageFn] = {
    alg.GENERATE: _generate, alg.INFER: _infer, alg.TRAIN: _train, alg.SYNC: _sync,
    alg.SWITCH: _switch, alg.CPU: _cpu}
"""Stage kind -> its cost function."""


def has_lm_head(stage: alg.StageSpec) -> bool:
  """Whether ``stage`` computes the vocabulary head: the policy's (and the
  reference's) log-probs and the actor's training; value and reward heads
  output one number per token."""
  if stage.kind == alg.INFER:
    return stage.role in ("actor", "reference")
  return stage.kind == alg.TRAIN and stage.role == "actor"


def pool_devices(plan: plan_lib.Plan, cluster: Cluster) -> dict[str, Hardware]:
  """Pool name -> its accelerator."""
  return {p.name: p.device(cluster) for p in plan.pools}


def stage_inputs(stage: alg.StageSpec, job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
                 gpus: dict[str, jax.Array], **extra) -> tuple:
  """``(model, layout, device, ctx)`` of ``stage`` under ``plan``.

  Args:
    stage: The stage.
    job, plan, cluster: What is estimated.
    gpus: Pool name -> GPUs.
    **extra: Further :class:`StageContext` fields (the switch's bytes).
  """
  if stage.kind == alg.CPU:
    return None, None, None, StageContext(cluster, controller=plan.mode.single_controller,
                                          **extra)
  devices = pool_devices(plan, cluster)
  pool = alg.stage_pool(stage, plan)
  actor = plan.role("actor")
  ctx = StageContext(cluster, pool_gpus=gpus[pool], lm_head=has_lm_head(stage),
                     controller=plan.mode.single_controller, **extra,
                     role=stage.role,
                     # only a scoring stage reads it (a LoRA reference); other stages
                     # of families that place the actor elsewhere share their inputs
                     with_actor=(stage.kind == alg.INFER and actor is not None
                                 and actor.pool == pool))
  if stage.kind in (alg.GENERATE, alg.SWITCH):
    return job.actor, plan.engine, devices[pool], ctx
  r = plan.role(stage.role)
  model = plan_lib.role_model(job, stage.role)
  if stage.kind == alg.INFER:
    return model, r.infer_layout, devices[pool], ctx
  if stage.kind == alg.SYNC:
    rollout = plan.rollout_pool
    ctx = ctx._replace(engine=plan.engine, peer_gpus=gpus[rollout],
                       peer_device=devices[rollout], colocated=pool == rollout)
  elif plan.mode.require_batches is not None:  # a streaming trainer: one call per chunk
    ctx = ctx._replace(calls=float(job.mini_batches // plan.mode.require_batches))
  return model, r.train, devices[pool], ctx


def _stage_job(stage: alg.StageSpec, job: RLJob) -> RLJob:
  if job.multi_turn is not None and stage.kind != alg.GENERATE:
    return agentic.trajectory_job(job)  # scoring and training see whole episodes
  return job


def stage_cost(stage: alg.StageSpec, job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
               gpus: dict[str, jax.Array], eff: Efficiency, tau=0.0,
               **extra) -> common.StageCost:
  """The cost of ``stage`` under ``plan``: its kind's function on its pool's device."""
  job = _stage_job(stage, job)
  model, layout, device, ctx = stage_inputs(stage, job, plan, cluster, gpus, **extra)
  return STAGE_FUNCTIONS[stage.kind](model, layout, device, job, eff, tau, ctx)


def _signature(inputs: tuple) -> tuple[tuple, list]:
  """What must be equal for two plans' inputs of a stage to share one cost
  computation (the model, devices and cluster as objects; the tree of the
  layout and context; their Python values), and their leaves."""
  model, layout, device, ctx = inputs
  ident = (id(model), id(device), id(ctx.cluster), id(ctx.peer_device))
  leaves, treedef = jax.tree.flatten((layout, ctx._replace(cluster=None, peer_device=None)))
  static = tuple(None if isinstance(x, (jax.Array, np.ndarray)) else x for x in leaves)
  return (ident, treedef, static), leaves


def array_leaves(inputs: tuple) -> list:
  """The array leaves of a stage's inputs (its layout and context, the cluster
  and devices left out): all that two plans' inputs of one group may differ in."""
  return [x for x in _signature(inputs)[1] if isinstance(x, (jax.Array, np.ndarray))]


def _select(which, members: list[int], inputs: dict[int, tuple],
            signed: dict[int, tuple]) -> tuple:
  """The inputs of plan ``which`` among ``members`` (whose signatures agree), leaf
  by leaf (the first member's where ``which`` is none of them); ``signed``: each
  plan's :func:`_signature`."""
  first = inputs[members[0]]
  if len(members) == 1:
    return first
  (_, treedef, static), _ = signed[members[0]]
  leaves = []
  for j, fixed in enumerate(static):
    out = signed[members[0]][1][j]
    if fixed is None:
      for k in members[1:]:
        out = jnp.where(which == k, signed[k][1][j], out)
    leaves.append(out)
  model, _, device, ctx = first
  layout, rest = jax.tree.unflatten(treedef, leaves)
  return model, layout, device, rest._replace(cluster=ctx.cluster, peer_device=ctx.peer_device)


def shared_stage_inputs(stages: dict[int, alg.StageSpec], job: RLJob,
                        plans: tuple[plan_lib.Plan, ...], cluster: Cluster,
                        gpus: tuple[dict[str, jax.Array], ...], which
                        ) -> list[tuple[list[int], alg.StageSpec, tuple]]:
  """The groups of plans that share one cost computation of a stage, each with
  the stage and the inputs it is costed on (those of plan ``which`` where it is
  a member): plans whose inputs differ only in array values (pool sizes, layout
  degrees) form one group.

  Args and ``which`` as in :func:`shared_stage_costs`.

  Returns:
    ``[(members, stage, (model, layout, device, ctx)), ...]``, one per group,
    in the order of the plans.
  """
  inputs = {k: stage_inputs(st, _stage_job(st, job), plans[k], cluster, gpus[k])
            for k, st in stages.items()}
  signed = {k: _signature(x) for k, x in inputs.items()}
  groups: dict[tuple, list[int]] = {}
  for k in stages:
    groups.setdefault(signed[k][0], []).append(k)
  return [(members, stages[members[0]], _select(which, members, inputs, signed))
          for members in groups.values()]


def group_cost(stage: alg.StageSpec, job: RLJob, inputs: tuple, eff: Efficiency,
               tau) -> common.StageCost:
  """The cost of ``stage`` on a group's ``inputs`` (:func:`shared_stage_inputs`)."""
  model, layout, device, ctx = inputs
  return STAGE_FUNCTIONS[stage.kind](model, layout, device, _stage_job(stage, job), eff, tau,
                                     ctx)


def shared_stage_costs(stages: dict[int, alg.StageSpec], job: RLJob,
                       plans: tuple[plan_lib.Plan, ...], cluster: Cluster,
                       gpus: tuple[dict[str, jax.Array], ...], eff: Efficiency, tau,
                       which) -> dict[int, common.StageCost]:
  """The cost of one stage under several plans of which only ``plans[which]``
  is meant (``which`` may be traced), computed once for every group of plans
  whose inputs differ only in array values (pool sizes, layout degrees): the
  group's cost function runs on the inputs of plan ``which``, so a program
  that estimates every plan of a search's families costs each stage once.

  Args:
    stages: Plan index -> the stage in that plan's graph (the plans that have it).
    job, plans, cluster: What is estimated.
    gpus: Each plan's pool name -> GPUs.
    eff: Efficiency parameters.
    tau: Smoothing temperature.
    which: Index of the plan meant.

  Returns:
    Plan index -> the stage's cost, exact for plan ``which`` (and for every plan
    when ``which`` is concrete); a plan outside ``which``'s group gets its group's
    cost on another plan's inputs.
  """
  out = {}
  for members, stage, inputs in shared_stage_inputs(stages, job, plans, cluster, gpus, which):
    out.update(dict.fromkeys(members, group_cost(stage, job, inputs, eff, tau)))
  return out
