"""Stages on pools' timelines: start and end, pool busy time, the step time.

* Synchronous (staleness 0): stages run in order; a stage starts when its
  inputs are ready and its pool is free (a disaggregated weight sync holds
  both pools). The step is the makespan.
* Off-policy with staleness k >= 1 (or veRL's fractional staleness
  threshold): generation of step i + k overlaps training of step i through a
  bounded queue. The steady-state step is the busiest pool's time per step
  (weight sync counted on both sides), and at least the critical path over
  k + 1 steps in flight (:func:`steady_state_s`). A streaming trainer
  (``require_batches``) overlaps all but its last chunk with generation, on
  policy (k = 0) too.
* Partial rollouts (fully asynchronous): generation runs at its steady
  concurrency; the tail the queue cannot absorb stays
  (:func:`partial_generation_s`).
* Fusion: inference of finished samples overlaps the generation tail; actor
  and critic training share one pipeline (one bubble instead of two).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.ops import smooth
from costmodel._src.specs import plan as plan_lib
from costmodel._src.stages import common
from costmodel._src.step import algorithms as alg
from costmodel._src.step.residency import Residency


class Schedule(NamedTuple):
  """The step's timeline.

  Attributes:
    costs: Stage name -> cost after the mode's adjustments (partial rollouts,
      fused training).
    durations: Stage name -> time on its timeline (fused inference hides
      part of it in the generation tail).
    start, end: Stage name -> start and end within the step.
    busy: Pool name -> busy time per step.
    step_time_s: Steady-state step time.
  """

  costs: dict[str, common.StageCost]
  durations: dict[str, jax.Array]
  start: dict[str, jax.Array]
  end: dict[str, jax.Array]
  busy: dict[str, jax.Array]
  step_time_s: jax.Array


def _scale_parts(cost: common.StageCost, new_time) -> common.StageCost:
  f = new_time / jnp.maximum(cost.time_s, 1e-12)
  return cost._replace(time_s=new_time, compute_s=cost.compute_s * f,
                       memory_s=cost.memory_s * f, comm_s=cost.comm_s * f,
                       bubble_s=cost.bubble_s * f, overhead_s=cost.overhead_s * f)


def partial_generation_s(gen: common.StageCost, depth, tau=0.0):
  """Generation per step with partial rollouts and a queue ``depth`` steps deep.

  Unfinished requests carry over to the next step, so a step runs at the
  steady concurrency; the tail beyond what the queue absorbs (``depth``
  steps of steady generation ahead of the trainer) stays exposed, so a
  shallow queue (veRL's staleness_threshold 0.1) keeps most of it.
  """
  steady = gen.extras["steady_time_s"]
  tail = smooth.relu(gen.time_s - steady, gen.time_s, tau)
  return steady + smooth.relu(tail - depth * steady, gen.time_s, tau)


def steady_state_s(durations: dict, pools: dict, order, rollout: str, busy: dict,
                   mode: plan_lib.Mode, mini_batches: int, tau=0.0):
  """The step of a pipelined (asynchronous or streaming) mode.

  The generator and the trainer run concurrently with a bounded queue
  between them, ``k = mode.queue_depth`` steps deep: the slower side sets the
  step (the faster one waits: the pools' idle time), and the chain of one
  step (generation, then the trainer's stages, then the sync) spread over the
  ``k + 1`` steps in flight bounds it from below. A streaming trainer
  (``require_batches``) starts on its first chunk, so only its last chunk's
  share of the training follows generation.
  """
  stream = 1.0 if mode.require_batches is None else mode.require_batches / mini_batches
  trainer = sum(durations[n] for n in order if n != alg.GENERATE and pools[n] != rollout
                and n != alg.SWITCH)
  critical = durations[alg.GENERATE] + stream * trainer
  pool_max = smooth.smax_n(jnp.stack(list(busy.values())), tau)
  return smooth.smax(pool_max, critical / (mode.queue_depth + 1.0), tau)


def mode_costs(costs: dict[str, common.StageCost], mode: plan_lib.Mode,
               tau=0.0) -> dict[str, common.StageCost]:
  """Stage costs under the mode: partial rollouts cut the generation tail, fused
  training hides the shorter pipeline bubble of actor and critic."""
  costs = dict(costs)
  gen = costs[alg.GENERATE]
  if mode.partial_rollout:
    costs[alg.GENERATE] = _scale_parts(gen, partial_generation_s(gen, mode.queue_depth, tau))
  if mode.fuse_training and alg.CRITIC_UPDATE in costs:
    a, c = costs[alg.ACTOR_UPDATE], costs[alg.CRITIC_UPDATE]
    saved = smooth.smin(a.bubble_s, c.bubble_s, tau)
    costs[alg.CRITIC_UPDATE] = c._replace(time_s=c.time_s - saved,
                                          bubble_s=c.bubble_s - saved)
  return costs


def _durations(res: Residency, costs, mode: plan_lib.Mode, tau):
  durations = {st.name: costs[st.name].time_s for st in res.stages}
  if mode.fuse_inference:
    # Inference of finished samples runs in the idle half of the tail: one
    # window of 0.5 * tail shared by every stage that only needs the rollouts.
    gen = costs[alg.GENERATE]
    remaining = 0.5 * gen.extras["tail_share"] * gen.extras["decode_s"]
    for st in res.stages:
      if st.kind in (alg.INFER, alg.CPU) and st.deps in ((alg.GENERATE,), (alg.SWITCH,)):
        hidden = smooth.smin(durations[st.name], remaining + 1e-9, tau)
        durations[st.name] = durations[st.name] - hidden
        remaining = jnp.maximum(remaining - hidden, 0.0)
  return durations


def schedule(res: Residency, plan: plan_lib.Plan, tau=0.0, mini_batches: int = 1) -> Schedule:
  """Places the stages of ``res`` on their pools' timelines under ``plan.mode``.

  ``mini_batches`` (the job's) sets a streaming trainer's chunk share.
  """
  mode = plan.mode
  rollout = plan.rollout_pool
  costs = mode_costs(res.costs, mode, tau)
  durations = _durations(res, costs, mode, tau)
  order = [st.name for st in res.stages]
  pools = res.pools
  end: dict[str, jax.Array] = {}
  start: dict[str, jax.Array] = {}
  free = {p: jnp.zeros(()) for p in list(plan.pool_names) + [alg.CPU_POOL]}
  async_mode = mode.staleness > 0
  for st in res.stages:
    name = st.name
    pool_list = [pools[name]]
    if st.kind == alg.SYNC and not async_mode:
      pool_list = sorted({pools[name], rollout})
    if st.kind == alg.CPU and mode.single_controller and not async_mode:
      # The controller scores the reward itself and dispatches nothing meanwhile
      # (veRL: the ``reward`` timer before the old log-probs, ray_trainer.py).
      pool_list = sorted(set(plan.pool_names) | {pools[name]})
    ready = jnp.zeros(())
    for d in st.deps:
      if async_mode and d == alg.GENERATE:
        continue  # data comes from an earlier step's rollouts
      ready = smooth.smax(ready, end[d], tau) if d in end else ready
    for p in pool_list:
      ready = smooth.smax(ready, free[p], tau)
    start[name] = ready
    end[name] = ready + durations[name]
    for p in pool_list:
      free[p] = end[name]

  busy = {p: jnp.zeros(()) for p in plan.pool_names}
  for name in order:
    if pools[name] in busy:
      busy[pools[name]] = busy[pools[name]] + durations[name]
  if mode.pipelined:
    busy[rollout] = busy[rollout] + durations[alg.WEIGHT_SYNC]
    step = steady_state_s(durations, pools, order, rollout, busy, mode, mini_batches, tau)
  else:
    step = smooth.smax_n(jnp.stack([end[n] for n in order]), tau)
  return Schedule(costs, durations, start, end, busy, step)
