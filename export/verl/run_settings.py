"""The options veRL's command-line export takes for a plan, and the keys an imported run keeps.

veRL reads a micro-batch key only with its dynamic-batch switch off; with the switch
on, the token budget per GPU sets the micro-batch (budget / sequence tokens, as
:mod:`export.verl.importer` reads a run). A change of micro-batch in a run that keeps
its dynamic batch is therefore a change of its token budget.
"""

from __future__ import annotations

import math
from typing import Any

import costmodel as cm


def run_options(plan: cm.Plan) -> dict[str, Any]:
  """The training backend the actor's layout needs (Megatron for TP/PP/EP or ZeRO <= 1, else
  FSDP, FSDP2 with the CPU optimizer: its ``offload_policy``) and the trainer its mode needs
  (the legacy recipes for split synchronous and one-step-off plans, else v1)."""
  a = plan.role("actor").train
  megatron = float(a.tp) * float(a.pp) * float(a.ep) > 1 or float(a.zero_stage) <= 1
  split = plan.rollout_pool != plan.role("actor").pool
  legacy = split and (plan.mode.staleness == 0 or not plan.mode.partial_rollout)
  fsdp = "fsdp2" if float(a.offload) else "fsdp"
  return {"strategy": "megatron" if megatron else fsdp, "version": "legacy" if legacy else "v1"}


# (micro-batch key, its switch, its token budget); an unset switch follows the actor's.
_ACTOR_SWITCH = "actor_rollout_ref.actor.use_dynamic_bsz"
_DYNAMIC = tuple(
    (f"{pre}.{mb}", f"{pre}.{switch}", f"{pre}.{tokens}") for pre, mb, switch, tokens in (
        ("actor_rollout_ref.actor", "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz",
         "ppo_max_token_len_per_gpu"),
        ("actor_rollout_ref.rollout", "log_prob_micro_batch_size_per_gpu",
         "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
        ("actor_rollout_ref.ref", "log_prob_micro_batch_size_per_gpu",
         "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
        ("critic", "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz",
         "ppo_max_token_len_per_gpu")))


def _on(value: Any) -> bool:
  return str(value).strip().lower() in ("true", "1", "yes")


def run_keeps(a: dict, b: dict, run: dict, job: cm.RLJob) -> None:
  """``a`` and ``b`` (settings of the current and the new plan) in the keys the run keeps:
  a micro-batch under the run's dynamic batch becomes its token budget (the run's, and the
  new micro-batch x the mean sequence)."""
  seq = float(job.prompt_len) + float(job.response.mean)
  for mb, switch, tokens in _DYNAMIC:
    if not _on(run.get(switch, run.get(_ACTOR_SWITCH))):
      continue
    old, new = a.pop(mb, None), b.pop(mb, None)
    if new is not None and old != new:
      a[tokens] = run.get(tokens, "(unset)")
      b[tokens] = int(math.ceil(float(new) * seq))
