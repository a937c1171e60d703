"""Algorithms as stage graphs.

Each algorithm is a list of stages with their dependencies; which stages appear
depends on the job's roles (reference model, critic, reward model):

* PPO: generate -> {reward, reference, old log-probs, values} -> GAE ->
  {critic update, actor update} -> weight sync;
* GRPO, DAPO, RLOO, REINFORCE++: no critic; group baselines need no extra
  stage; DAPO drops the KL term (no reference) and over-samples;
* ReMax: one extra greedy rollout per prompt as its baseline (more
  generation).
"""

from __future__ import annotations

from typing import NamedTuple

from costmodel._src.specs.job import RLJob

# ----- the stage vocabulary: every stage kind and name, defined here only -------

GENERATE, INFER, TRAIN, SYNC, SWITCH, CPU = "generate", "infer", "train", "sync", "switch", "cpu"
KINDS = (GENERATE, INFER, TRAIN, SYNC, SWITCH, CPU)
"""Stage kinds; each kind has one cost function (``costmodel._src.stages.registry``)."""

REWARD, REFERENCE, OLD_LOG_PROB, VALUES = "reward", "reference", "old_log_prob", "values"
CRITIC_UPDATE, ACTOR_UPDATE, WEIGHT_SYNC = "critic_update", "actor_update", "weight_sync"
STAGE_NAMES = (GENERATE, SWITCH, REWARD, REFERENCE, OLD_LOG_PROB, VALUES, CRITIC_UPDATE,
               ACTOR_UPDATE, WEIGHT_SYNC)
"""Every stage name an estimate can hold, in pipeline order (the switch is the
train <-> generate round trip of a colocated rollout pool)."""

CPU_POOL = "cpu"
"""Pool name of stages that run on the CPUs (rule-based rewards)."""

VERL_LOG_STAGES: dict[str, tuple[str, ...]] = {
    "gen": (GENERATE,),
    "ref": (REFERENCE,),
    "old_log_prob": (OLD_LOG_PROB,),
    "values": (VALUES,),
    "reward": (REWARD,),
    "adv": (),
    "update_actor": (ACTOR_UPDATE,),
    "update_critic": (CRITIC_UPDATE,),
    "update_weights": (WEIGHT_SYNC,),
    "step": (),
}
"""veRL's ``timing_s/<key>`` stage keys, in pipeline order, and the estimate
stages each one times (``adv`` and ``step`` time none: the advantage is not a
stage of the model and ``step`` is the whole step). In a colocated
(hybrid-engine) run ``gen`` also covers the switch, and the weight reshard when
the log does not time it as ``update_weights`` (see :func:`verl_log_stages`)."""

VERL_LOG_ALIASES: dict[str, str] = {"reshard": "update_weights",
                                    "sync_weights": "update_weights"}
"""Other veRL versions' names of a stage key."""


def verl_log_stages(colocated: bool, times_weight_sync: bool = True) -> dict[str, tuple[str, ...]]:
  """veRL log stage -> estimate stages, for a run with or without a shared rollout pool.

  Args:
    colocated: The actor trains on the rollout pool (hybrid engine).
    times_weight_sync: The log times the weight reshard as ``update_weights``;
      when it does not, a colocated ``gen`` covers it.
  """
  out = {k: v for k, v in VERL_LOG_STAGES.items() if v}
  if colocated:
    out["gen"] = (GENERATE, SWITCH) + (() if times_weight_sync else (WEIGHT_SYNC,))
  return out



class StageSpec(NamedTuple):
  """One stage of the step graph."""

  name: str
  kind: str  # one of KINDS
  role: str | None  # the role whose pool runs it (None: rollout pool / CPU)
  deps: tuple[str, ...]


def stage_graph(job: RLJob) -> tuple[StageSpec, ...]:
  """The stages of one RL step of ``job``, in a topological order."""
  stages = [StageSpec(GENERATE, GENERATE, None, ())]
  scored = []
  if job.has_reward_model:
    stages.append(StageSpec(REWARD, INFER, "reward", (GENERATE,)))
  else:
    stages.append(StageSpec(REWARD, CPU, None, (GENERATE,)))
  scored.append(REWARD)
  if job.use_reference:
    stages.append(StageSpec(REFERENCE, INFER, "reference", (GENERATE,)))
    scored.append(REFERENCE)
  stages.append(StageSpec(OLD_LOG_PROB, INFER, "actor", (GENERATE,)))
  scored.append(OLD_LOG_PROB)
  if job.has_critic:
    stages.append(StageSpec(VALUES, INFER, "critic", (GENERATE,)))
    scored.append(VALUES)
    stages.append(StageSpec(CRITIC_UPDATE, TRAIN, "critic", tuple(scored)))
  stages.append(StageSpec(ACTOR_UPDATE, TRAIN, "actor", tuple(scored)))
  stages.append(StageSpec(WEIGHT_SYNC, SYNC, "actor", (ACTOR_UPDATE,)))
  return tuple(stages)


def without_stage(graph: tuple[StageSpec, ...], name: str) -> tuple[StageSpec, ...]:
  """``graph`` without stage ``name``; its dependents depend on its inputs."""
  gone = [st for st in graph if st.name == name]
  if not gone:
    return graph
  inputs = gone[0].deps
  out = []
  for st in graph:
    if st.name == name:
      continue
    deps = []
    for d in st.deps:
      for x in (inputs if d == name else (d,)):
        if x not in deps:
          deps.append(x)
    out.append(st._replace(deps=tuple(deps)))
  return tuple(out)


def stage_pool(stage: StageSpec, plan) -> str:
  """The pool that runs ``stage`` under ``plan``: the rollout pool for generation
  (and the switch), the CPUs for a CPU stage, else its role's pool."""
  if stage.kind in (GENERATE, SWITCH):
    return plan.rollout_pool
  if stage.kind == CPU:
    return CPU_POOL
  return plan.role(stage.role).pool


def state_stage(graph: tuple[StageSpec, ...], role: str) -> StageSpec:
  """The stage whose memory holds ``role``'s state between stages: its training
  stage for a trained role, else its inference stage."""
  own = [st for st in graph if st.role == role and st.kind in (TRAIN, INFER)]
  trained = [st for st in own if st.kind == TRAIN]
  if not own:
    raise ValueError(f"state_stage: role={role!r} runs no stage of this graph")
  return (trained or own)[0]
