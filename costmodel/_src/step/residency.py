"""What stays in memory across the stages of a step, and what is offloaded.

Each role keeps its state between stages: a trained role its weights and
optimizer state (what its training holds on the GPU), an inference-only role
its weights, unless the role swaps them to the host (``Parallel.swap``, as
veRL's FSDP and Megatron offload flags do). Roles on the rollout pool pay the
switch: the engine sleeps and wakes around generation, and the swapped state
goes to the host and back over the host link; the HBM it frees holds the KV
cache. Swapping is not the CPU optimizer (``Parallel.offload``), whose state
stays on the host. The switch is a stage of its own, after generation, on the rollout pool;
stages of that pool that only need the rollouts wait for it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import plan as plan_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.stages import common
from costmodel._src.stages import registry
from costmodel._src.step import algorithms as alg

SWITCH_STAGE = alg.StageSpec(alg.SWITCH, alg.SWITCH, None, (alg.GENERATE,))


class Residency(NamedTuple):
  """The step's stages with the switch placed, and each role's resident bytes.

  Attributes:
    stages: Stages in execution order, the switch (colocated rollout pools)
      right after generation, dependencies rewired through it.
    pools: Stage name -> pool name.
    resident_bytes: Role -> bytes per GPU it keeps in HBM between stages.
    costs: Stage name -> cost, the switch's included.
  """

  stages: tuple[alg.StageSpec, ...]
  pools: dict[str, str]
  resident_bytes: dict[str, jax.Array]
  costs: dict[str, common.StageCost]


def _kept_and_moved(cost: common.StageCost, stage: alg.StageSpec, r: plan_lib.RolePlan):
  """(bytes kept in HBM, bytes swapped to the host and back) per GPU of a role's
  state between its stages.

  A trained role's state is what its training holds on the GPU (weights and
  optimizer state; ``Parallel.offload``, the CPU optimizer, already keeps its
  share on the host for good, so it neither stays nor moves); ``swap`` moves
  it to the host while the pool generates. An inference-only role swaps its
  weights with either flag.
  """
  m = cost.memory
  if stage.kind == alg.TRAIN:
    state, swap = m.weights + m.optimizer, jnp.asarray(r.train.swap, float)
  else:
    lay = r.infer_layout
    state = m.weights
    swap = jnp.maximum(jnp.asarray(lay.offload, float), jnp.asarray(lay.swap, float))
  return state * (1.0 - swap), state * swap


def placed(graph: tuple[alg.StageSpec, ...], plan: plan_lib.Plan) -> tuple[alg.StageSpec, ...]:
  """The stages of ``graph`` in execution order under ``plan``: the switch right
  after generation where a role shares the rollout pool, the stages of that
  pool that only need the rollouts waiting for it."""
  rollout = plan.rollout_pool
  if not any(r.pool == rollout for r in plan.roles):
    return tuple(graph)
  stages = [st if st.deps != (alg.GENERATE,) or alg.stage_pool(st, plan) != rollout
            else st._replace(deps=(alg.SWITCH,)) for st in graph]
  stages.insert(1, SWITCH_STAGE)
  return tuple(stages)


def residency(graph: tuple[alg.StageSpec, ...], costs: dict[str, common.StageCost],
              job: RLJob, plan: plan_lib.Plan, cluster: Cluster, gpus: dict[str, jax.Array],
              eff: Efficiency) -> Residency:
  """Places the switch and measures what each role keeps resident.

  Args:
    graph: The algorithm's stage graph.
    costs: Stage name -> cost of every stage of ``graph``.
    job, plan, cluster: What is estimated.
    gpus: Pool name -> GPUs.
    eff: Efficiency parameters.
  """
  rollout = plan.rollout_pool
  resident = {}
  offload_bytes = jnp.zeros(())
  for r in plan.roles:
    st = alg.state_stage(graph, r.role)
    resident[r.role], moved = _kept_and_moved(costs[st.name], st, r)
    if r.pool == rollout:
      offload_bytes = offload_bytes + moved
  colocated = [r for r in plan.roles if r.pool == rollout]
  costs = dict(costs)
  if colocated:
    res_gen = sum(resident[r.role] for r in colocated)
    costs[alg.SWITCH] = registry.stage_cost(SWITCH_STAGE, job, plan, cluster, gpus, eff,
                                            resident_bytes=res_gen,
                                            offload_bytes=offload_bytes)
  stages = placed(graph, plan)
  pools = {st.name: alg.stage_pool(st, plan) for st in stages}
  return Residency(stages, pools, resident, costs)


def stage_memory(res: Residency, plan: plan_lib.Plan) -> list[common.Memory]:
  """Bytes per GPU held while each stage runs: its own, plus the state the
  pool's other roles keep resident (counted as optimizer bytes). The switch
  holds them already; CPU stages hold none."""
  rows = []
  for st in res.stages:
    m = res.costs[st.name].memory
    pool = res.pools[st.name]
    if st.kind not in (alg.CPU, alg.SWITCH):
      others = sum((res.resident_bytes[r.role] for r in plan.roles
                    if r.pool == pool and r.role != st.role), jnp.zeros(()))
      m = m._replace(optimizer=m.optimizer + others)
    rows.append(m)
  return rows
