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

from costmodel._src.job import RLJob


class StageSpec(NamedTuple):
  """One stage of the step graph."""

  name: str
  kind: str  # generate | infer | train | sync | switch | cpu
  role: str | None  # the role whose pool runs it (None: rollout pool / CPU)
  deps: tuple[str, ...]


def stage_graph(job: RLJob) -> tuple[StageSpec, ...]:
  """The stages of one RL step of ``job``, in a topological order."""
  stages = [StageSpec("generate", "generate", None, ())]
  scored = []
  if job.has_reward_model:
    stages.append(StageSpec("reward", "infer", "reward", ("generate",)))
  else:
    stages.append(StageSpec("reward", "cpu", None, ("generate",)))
  scored.append("reward")
  if job.use_reference:
    stages.append(StageSpec("reference", "infer", "reference", ("generate",)))
    scored.append("reference")
  stages.append(StageSpec("old_log_prob", "infer", "actor", ("generate",)))
  scored.append("old_log_prob")
  if job.has_critic:
    stages.append(StageSpec("values", "infer", "critic", ("generate",)))
    scored.append("values")
    stages.append(StageSpec("critic_update", "train", "critic", tuple(scored)))
  stages.append(StageSpec("actor_update", "train", "actor", tuple(scored)))
  stages.append(StageSpec("weight_sync", "sync", "actor", ("actor_update",)))
  return tuple(stages)
