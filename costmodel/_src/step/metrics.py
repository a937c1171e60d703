"""From a scheduled step to its :class:`Estimate`: throughput, MFU, the lower
bound, memory per stage and whether the plan fits.

Memory is judged here only. Per stage, ``memory_excess = relu_tau(need /
limit - 1)`` with the limit the HBM of the stage's pool's GPU (with a relative
tolerance of :data:`FIT_TOLERANCE`); the generation row adds the engine's own
budget, ``relu_tau((engine weights + workspace + one longest sequence's KV) /
(memory_fraction x HBM) - 1)``. ``relu_tau`` is :func:`smooth.relu_flat`: the
exact relu at tau = 0 and, for tau > 0 (the search's penalty), a surrogate
with a continuous gradient that is still exactly zero where the plan fits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel._src.ops import smooth
from costmodel._src.specs import plan as plan_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.stages import common
from costmodel._src.stages import registry
from costmodel._src.step import algorithms as alg
from costmodel._src.step.residency import Residency
from costmodel._src.step.residency import stage_memory
from costmodel._src.step.result import Estimate
from costmodel._src.step.schedule import Schedule

FIT_TOLERANCE = 1e-6
"""Relative slack of a memory limit (need <= limit x (1 + tolerance) fits)."""

_NO_LIMIT_BYTES = 1e30  # CPU stages hold no GPU memory
_EXCESS_WIDTH = 0.1  # smoothing width of the excess: 0.1 tau of the limit


def _engine_ratio(gen: common.StageCost) -> jax.Array:
  """The engine's own need over its budget, minus one: its weights, workspace
  and the KV cache of one longest sequence against ``memory_fraction x HBM``
  (<= 0 when one sequence fits)."""
  need = gen.memory.weights + gen.memory.workspace + gen.extras["min_kv_bytes"]
  return need / gen.extras["limit_bytes"] - 1.0


def memory_excess(need: jax.Array, limits: jax.Array, on_gpu: tuple[bool, ...],
                  gen_index: int, gen: common.StageCost, tau=0.0):
  """``(excess [stages], exact fit)``: the smooth memory excess per stage (its
  bytes per GPU ``need`` against ``limits``) and whether every stage fits (the
  exact, tau-free condition behind it)."""
  ratio = need / (limits * (1.0 + FIT_TOLERANCE)) - 1.0
  mask = jnp.asarray(on_gpu, bool)
  ratio = jnp.where(mask, ratio, -1.0)
  engine = _engine_ratio(gen)
  onehot = jnp.arange(len(on_gpu)) == gen_index
  excess = jnp.where(mask, smooth.relu_flat(ratio, _EXCESS_WIDTH, tau), 0.0)
  excess = excess + jnp.where(onehot, smooth.relu_flat(engine, _EXCESS_WIDTH, tau), 0.0)
  fits = jnp.all(ratio <= 0.0) & (engine <= 0.0)
  return excess, fits


BOUND_KINDS = (alg.GENERATE, alg.INFER, alg.TRAIN)
"""Stage kinds whose work every plan of the job does (sync and switch may
vanish with the layout, the old log-prob pass with the mode)."""


def lower_bound_s(res: Residency, n_gpus) -> jax.Array:
  """A bound no plan of this job on these GPUs beats, whatever its layout or mode.

  The work every plan does (generation, inference and training at the
  hardware's best rates, from the job alone; not the old log-prob pass,
  which a mode may take from the engine) spread over all GPUs. A plan's step
  is at least its busiest pool's time, each stage at least its work over its
  pool, so step x GPUs >= the work. No depth term: partial rollouts and
  staleness spread the longest response over steps.
  """
  work = sum((jnp.asarray(res.costs[st.name].work_gpu_s, float) for st in res.stages
              if st.kind in BOUND_KINDS and st.name != alg.OLD_LOG_PROB), jnp.zeros(()))
  return work / n_gpus


def assemble(job: RLJob, plan: plan_lib.Plan, cluster: Cluster, gpus: dict[str, jax.Array],
             res: Residency, sched: Schedule, tau=0.0) -> Estimate:
  """The :class:`Estimate` of a scheduled step."""
  names = tuple(st.name for st in res.stages)
  pools = res.pools
  costs, durations = sched.costs, sched.durations
  devices = registry.pool_devices(plan, cluster)
  step = sched.step_time_s
  parts = jnp.stack([jnp.stack([costs[n].compute_s, costs[n].memory_s, costs[n].comm_s,
                                costs[n].bubble_s, costs[n].overhead_s]) for n in names])
  # Fused durations: attribute the hidden time out of the overhead-free parts.
  scale = jnp.stack([durations[n] / jnp.maximum(costs[n].time_s, 1e-12) for n in names])
  parts = parts * scale[:, None]
  work = jnp.stack([jnp.asarray(costs[n].work_gpu_s, float) for n in names])
  depth = jnp.stack([jnp.broadcast_to(jnp.asarray(costs[n].depth_s, float), ()) for n in names])
  flops = sum(jnp.asarray(costs[n].flops, float) for n in names)
  n_gpus = sum(gpus.values())
  peak = sum(gpus[p] * devices[p].peak_flops_per_s for p in plan.pool_names)
  samples = job.samples_per_step
  tokens = samples * (jnp.asarray(job.prompt_len, float) + job.response.mean)
  on_gpu = tuple(pools[n] != alg.CPU_POOL for n in names)
  gen = costs[alg.GENERATE]
  lower = lower_bound_s(res, n_gpus)

  held = [[jnp.broadcast_to(jnp.asarray(v, float), ()) for v in m] for m in stage_memory(res, plan)]
  memory = jnp.stack([jnp.stack(m) for m in held])
  # Each stage's total added field by field, not reduced from ``memory``: built
  # as a batch's [rows, stages, fields] array and reduced over its short last
  # axis, XLA on CPU runs the fit of 16,384 rows about 6x slower.
  need = jnp.stack([sum(m[1:], m[0]) for m in held])
  limit = jnp.stack([jnp.asarray(devices[pools[n]].hbm_bytes, float) if g
                     else jnp.asarray(_NO_LIMIT_BYTES) for n, g in zip(names, on_gpu, strict=True)])
  excess, fits = memory_excess(need, limit, on_gpu, names.index(alg.GENERATE), gen, tau)
  feasible = fits & (gen.extras["concurrency"] >= 1.0)
  pool_names = plan.pool_names
  busy_arr = jnp.stack([sched.busy[p] for p in pool_names])
  return Estimate(
      stage_names=names, stage_pools=tuple(pools[n] for n in names), pool_names=pool_names,
      mode=plan.mode.name, step_time_s=step,
      start_s=jnp.stack([sched.start[n] for n in names]),
      end_s=jnp.stack([sched.end[n] for n in names]),
      duration_s=jnp.stack([durations[n] for n in names]),
      time_parts_s=parts, work_gpu_s=work, depth_s=depth, memory_bytes=memory,
      memory_limit_bytes=limit, memory_excess=excess,
      pool_gpus=jnp.stack([gpus[p] for p in pool_names]),
      pool_busy_s=busy_arr, pool_idle_s=jnp.maximum(step - busy_arr, 0.0),
      tokens_per_s=tokens / step, samples_per_s=samples / step,
      tokens_per_s_per_gpu=tokens / step / n_gpus,
      mfu=flops / (step * peak), lower_bound_s=lower,
      feasible=feasible, gen_concurrency=gen.extras["concurrency"],
      gen_decode_tokens_per_s=gen.extras["decode_tokens_per_s"],
      gen_tail_share=gen.extras["tail_share"],
      gen_mean_concurrency=gen.extras["mean_concurrency"])
