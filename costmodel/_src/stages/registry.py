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
    with_actor: The stage's pool also holds the actor (a LoRA reference
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
                         eff, tau, lm_head=ctx.lm_head, controller=ctx.controller)
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
                     role=stage.role, with_actor=actor is not None and actor.pool == pool)
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


def stage_cost(stage: alg.StageSpec, job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
               gpus: dict[str, jax.Array], eff: Efficiency, tau=0.0,
               **extra) -> common.StageCost:
  """The cost of ``stage`` under ``plan``: its kind's function on its pool's device."""
  if job.multi_turn is not None and stage.kind != alg.GENERATE:
    job = agentic.trajectory_job(job)  # scoring and training see whole episodes
  model, layout, device, ctx = stage_inputs(stage, job, plan, cluster, gpus, **extra)
  return STAGE_FUNCTIONS[stage.kind](model, layout, device, job, eff, tau, ctx)
