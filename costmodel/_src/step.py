"""The RL step model: stage costs placed on pools and scheduled.

* Synchronous (staleness 0): stages run in topological order; a stage starts
  when its inputs are ready and its pool is free. Colocated pools pay the
  train <-> generate switch. The step is the makespan.
* Off-policy with staleness k >= 1: generation of step i + k overlaps training
  of step i. The steady-state step is the busiest pool's time per step
  (weight sync counted on both sides), and at least the critical path over
  k + 1 steps in flight.
* Partial rollouts (fully asynchronous): generation runs at its steady
  concurrency, without the tail.
* Fusion: inference of finished samples overlaps the generation tail; actor
  and critic training share one pipeline (one bubble instead of two).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel._src import algorithms
from costmodel._src import plan as plan_lib
from costmodel._src import smooth
from costmodel._src.cluster import Cluster
from costmodel._src.efficiency import Efficiency
from costmodel._src.estimate import Estimate
from costmodel._src.job import RLJob
from costmodel._src.stages import common
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import sync as sync_lib
from costmodel._src.stages import train as train_lib


def _scale_parts(cost: common.StageCost, new_time) -> common.StageCost:
  f = new_time / jnp.maximum(cost.time_s, 1e-12)
  return cost._replace(time_s=new_time, compute_s=cost.compute_s * f,
                       memory_s=cost.memory_s * f, comm_s=cost.comm_s * f,
                       bubble_s=cost.bubble_s * f, overhead_s=cost.overhead_s * f)


def _resident_bytes(cost: common.StageCost, offload) -> jax.Array:
  """Training bytes that stay in HBM between stages (weights + optimizer)."""
  m = cost.memory
  return (m.weights + m.optimizer) * (1.0 - jnp.asarray(offload, float))


def estimate(job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
             efficiency: Efficiency | None = None, tau=0.0) -> Estimate:
  """Predicts one steady-state RL step of ``job`` laid out as ``plan``.

  Pure and jittable: ``jax.jit(estimate)`` works, ``vmap`` batches plans of
  one structure (same pools, roles, mode) and ``grad`` reaches every leaf
  (layout degrees, pool sizes, hardware figures, efficiency parameters).

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
    ValueError: for a concrete plan that cannot run (see
      :func:`costmodel.validate_plan`).
  """
  plan_lib.validate(plan, job, cluster)
  eff = efficiency if efficiency is not None else Efficiency()
  hw = cluster.accelerator
  graph = algorithms.stage_graph(job)
  gpus = {p.name: jnp.asarray(p.gpus, float) for p in plan.pools}
  rollout = plan.rollout_pool
  mode = plan.mode

  costs: dict[str, common.StageCost] = {}
  pools: dict[str, str] = {}
  for st in graph:
    if st.kind == "generate":
      c = gen_lib.generate(job.actor, job, plan.engine, gpus[rollout], cluster, eff, tau)
      if mode.partial_rollout:
        c = _scale_parts(c, c.extras["steady_time_s"])
      costs[st.name], pools[st.name] = c, rollout
    elif st.kind == "cpu":
      t = job.samples_per_step * job.reward_cpu_s_per_sample / cluster.cpu_cores
      z = jnp.zeros(())
      costs[st.name] = common.make_cost(t, z, z, z, z, z, job.reward_cpu_s_per_sample, z,
                                        common.Memory.zeros())
      pools[st.name] = "cpu"
    elif st.kind == "infer":
      r = plan.role(st.role)
      model = plan_lib.role_model(job, st.role)
      costs[st.name] = infer_lib.infer(model, job, r.infer_layout, gpus[r.pool], cluster,
                                       eff, tau, lm_head=st.role in ("actor", "reference"))
      pools[st.name] = r.pool
    elif st.kind == "train":
      r = plan.role(st.role)
      model = plan_lib.role_model(job, st.role)
      costs[st.name] = train_lib.train(model, job, r.train, gpus[r.pool], cluster, eff, tau,
                                       lm_head=st.role == "actor")
      pools[st.name] = r.pool
    elif st.kind == "sync":
      r = plan.role("actor")
      costs[st.name] = sync_lib.weight_sync(
          job.actor, job, r.train, gpus[r.pool], plan.engine, gpus[rollout],
          r.pool == rollout, cluster, eff, tau)
      pools[st.name] = r.pool

  # Roles sharing the rollout pool: switch cost and resident memory.
  colocated = [r for r in plan.roles if r.pool == rollout]
  resident = {}
  offload_bytes = jnp.zeros(())
  for r in plan.roles:
    name = {"actor": "actor_update", "critic": "critic_update"}.get(r.role)
    if name in costs:
      res = _resident_bytes(costs[name], r.train.offload)
      m = costs[name].memory
      moved = (m.weights + m.optimizer) * jnp.asarray(r.train.offload, float)
    else:
      stage = {"reference": "reference", "reward": "reward"}[r.role]
      res = costs[stage].memory.weights * (1.0 - jnp.asarray(r.infer_layout.offload, float))
      moved = costs[stage].memory.weights * jnp.asarray(r.infer_layout.offload, float)
    resident[r.role] = res
    if r.pool == rollout:
      offload_bytes = offload_bytes + moved
  order = [st.name for st in graph]
  if colocated:
    res_gen = sum(resident[r.role] for r in colocated)
    costs["switch"] = sync_lib.switch(job.actor, job, plan.engine, res_gen, offload_bytes,
                                      cluster, eff)
    pools["switch"] = rollout
    order.insert(1, "switch")
    deps_extra = {"switch": ("generate",)}
  else:
    res_gen = jnp.zeros(())
    deps_extra = {}
  deps = {st.name: st.deps for st in graph}
  deps.update(deps_extra)
  for st in graph:
    if st.deps == ("generate",) and colocated and pools[st.name] == rollout:
      deps[st.name] = ("switch",)

  # Fusion adjustments.
  gen = costs["generate"]
  tail_s = gen.extras["tail_share"] * gen.extras["decode_s"]
  if mode.fuse_training and "critic_update" in costs:
    a, c = costs["actor_update"], costs["critic_update"]
    saved = smooth.smin(a.bubble_s, c.bubble_s, tau)
    costs["critic_update"] = c._replace(time_s=c.time_s - saved, bubble_s=c.bubble_s - saved)

  # Memory per stage: own bytes plus what other roles keep resident there.
  mem_rows, limits = [], []
  for name in order:
    c = costs[name]
    pool = pools[name]
    m = c.memory
    limit = hw.hbm_bytes
    if name == "generate":
      others = sum((resident[r.role] for r in colocated), jnp.zeros(()))
      m = m._replace(optimizer=m.optimizer + others)
    elif pool != "cpu" and name != "switch":  # the switch holds them already
      own = {"actor_update": "actor", "critic_update": "critic", "old_log_prob": "actor",
             "values": "critic", "reference": "reference", "reward": "reward",
             "weight_sync": "actor", "switch": None}.get(name)
      others = sum((resident[r.role] for r in plan.roles
                    if r.pool == pool and r.role != own), jnp.zeros(()))
      m = m._replace(optimizer=m.optimizer + others)
    mem_rows.append(jnp.stack([jnp.broadcast_to(jnp.asarray(v, float), ()) for v in m]))
    limits.append(jnp.asarray(limit, float) * (0.0 if pool == "cpu" else 1.0) + (
        1e30 if pool == "cpu" else 0.0))

  # Schedule.
  durations = {n: costs[n].time_s for n in order}
  if mode.fuse_inference:
    # Inference of finished samples runs in the idle half of the tail: one
    # window of 0.5 * tail shared by every stage that only needs the rollouts.
    remaining = 0.5 * tail_s
    for st in graph:
      if st.deps == ("generate",) and st.kind in ("infer", "cpu"):
        hidden = smooth.smin(durations[st.name], remaining + 1e-9, tau)
        durations[st.name] = durations[st.name] - hidden
        remaining = jnp.maximum(remaining - hidden, 0.0)
  end: dict[str, jax.Array] = {}
  start: dict[str, jax.Array] = {}
  free = {p: jnp.zeros(()) for p in list(gpus) + ["cpu"]}
  async_mode = mode.staleness > 0
  for name in order:
    pool_list = [pools[name]]
    if name == "weight_sync" and not async_mode:
      pool_list = sorted({pools[name], rollout})
    ready = jnp.zeros(())
    for d in deps.get(name, ()):
      if async_mode and d == "generate":
        continue  # data comes from an earlier step's rollouts
      ready = smooth.smax(ready, end[d], tau) if d in end else ready
    for p in pool_list:
      ready = smooth.smax(ready, free[p], tau)
    start[name] = ready
    end[name] = ready + durations[name]
    for p in pool_list:
      free[p] = end[name]

  busy = {p: jnp.zeros(()) for p in gpus}
  for name in order:
    if pools[name] in busy:
      busy[pools[name]] = busy[pools[name]] + durations[name]
  if async_mode:
    busy[rollout] = busy[rollout] + durations["weight_sync"]
    critical = durations["generate"] + sum(
        durations[n] for n in order if n not in ("generate",) and pools[n] != rollout
        and n != "switch") / 1.0
    pool_max = smooth.smax_n(jnp.stack(list(busy.values())), tau)
    step = smooth.smax(pool_max, critical / (mode.staleness + 1.0), tau)
  else:
    step = smooth.smax_n(jnp.stack([end[n] for n in order]), tau)

  names = tuple(order)
  parts = jnp.stack([jnp.stack([costs[n].compute_s, costs[n].memory_s, costs[n].comm_s,
                                costs[n].bubble_s, costs[n].overhead_s]) for n in names])
  # Fused durations: attribute the hidden time out of the overhead-free parts.
  scale = jnp.stack([durations[n] / jnp.maximum(costs[n].time_s, 1e-12) for n in names])
  parts = parts * scale[:, None]
  work = jnp.stack([jnp.asarray(costs[n].work_gpu_s, float) for n in names])
  depth = jnp.stack([jnp.broadcast_to(jnp.asarray(costs[n].depth_s, float), ()) for n in names])
  flops = sum(jnp.asarray(costs[n].flops, float) for n in names)
  n_gpus = sum(gpus.values())
  samples = job.samples_per_step
  tokens = samples * (jnp.asarray(job.prompt_len, float) + job.response.mean)
  gpu_work = sum(work[i] * (1.0 if pools[n] != "cpu" else 0.0) for i, n in enumerate(names))
  lower = smooth.smax(gpu_work / n_gpus, gen.depth_s, tau)
  memory = jnp.stack(mem_rows)
  limit = jnp.stack(limits)
  gen_limit_ok = (gen.memory.weights + gen.memory.workspace + gen.extras["min_kv_bytes"]
                  <= gen.extras["limit_bytes"])
  feasible = jnp.all(memory.sum(-1) <= limit * (1 + 1e-6)) & gen_limit_ok & (
      gen.extras["concurrency"] >= 1.0)
  pool_names = tuple(gpus)
  busy_arr = jnp.stack([busy[p] for p in pool_names])
  return Estimate(
      stage_names=names, stage_pools=tuple(pools[n] for n in names), pool_names=pool_names,
      mode=mode.name, step_time_s=step,
      start_s=jnp.stack([start[n] for n in names]), end_s=jnp.stack([end[n] for n in names]),
      time_parts_s=parts, work_gpu_s=work, depth_s=depth, memory_bytes=memory,
      memory_limit_bytes=limit, pool_gpus=jnp.stack([gpus[p] for p in pool_names]),
      pool_busy_s=busy_arr, pool_idle_s=jnp.maximum(step - busy_arr, 0.0),
      tokens_per_s=tokens / step, samples_per_s=samples / step,
      tokens_per_s_per_gpu=tokens / step / n_gpus,
      mfu=flops / (step * n_gpus * hw.peak_flops_per_s), lower_bound_s=lower,
      feasible=feasible, gen_concurrency=gen.extras["concurrency"],
      gen_decode_tokens_per_s=gen.extras["decode_tokens_per_s"],
      gen_tail_share=gen.extras["tail_share"],
      gen_mean_concurrency=gen.extras["mean_concurrency"])
