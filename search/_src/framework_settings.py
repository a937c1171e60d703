"""The settings each framework would run for a plan, and what changes between two plans.

No flags here: the command lines (:mod:`search._src.cli`) and the HTML report use it.
"""

from __future__ import annotations

import math
from typing import Any

import costmodel as cm
import export


def export_options(framework: str, plan: cm.Plan) -> dict[str, Any]:
  """The options a command-line export uses: the training backend the actor's layout needs
  (Megatron for TP/PP/EP or ZeRO <= 1, else FSDP, FSDP2 with the CPU optimizer), the trainer
  its mode needs, and for OpenRLHF vLLM's own ``max_num_seqs`` (it has no flag for it)."""
  a = plan.role("actor").train
  megatron = (float(a.tp) * float(a.pp) * float(a.ep) > 1 or float(a.zero_stage) <= 1)
  if framework == "verl":
    split = plan.rollout_pool != plan.role("actor").pool
    legacy = split and (plan.mode.staleness == 0 or not plan.mode.partial_rollout)
    fsdp = "fsdp2" if float(a.offload) else "fsdp"  # FSDP2's offload_policy: the CPU optimizer
    return {"strategy": "megatron" if megatron else fsdp, "version": "legacy" if legacy else "v1"}
  if framework == "openrlhf":
    return {"vllm_default_max_seqs": True}
  if framework == "nemo_rl":
    return {"backend": "megatron" if megatron else "dtensor"}
  return {}


def exports(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
            frameworks=export.FRAMEWORKS) -> dict[str, tuple[str | None, str | None]]:
  """``{framework: (text, None)}`` where it exports, ``(None, reason)`` where it refuses."""
  out = {}
  for fw in frameworks:
    e = export.get(fw)
    opts = export_options(fw, plan)
    try:
      out[fw] = (e.export(e.adapt(plan, **opts), job, cluster, **opts), None)
    except ValueError as err:
      out[fw] = (None, str(err))
  return out


# ----- a diff of settings --------------------------------------------------------------------


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(d, dict):
    out = {}
    for k, v in d.items():
      out.update(_flat(v, f"{prefix}{k}."))
    return out
  return {prefix[:-1]: d}


# veRL reads a micro-batch key only with its dynamic-batch switch off; with the
# switch on, the token budget per GPU sets the micro-batch (budget / sequence
# tokens, as export/_src/import_verl.py reads a run). (micro-batch key, its
# switch, its token budget); an unset switch follows the actor's.
_VERL_ACTOR_SWITCH = "actor_rollout_ref.actor.use_dynamic_bsz"
_VERL_DYNAMIC = tuple(
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


def _as_run_keeps_them(framework: str, a: dict, b: dict, run: dict | None, job: cm.RLJob
                       ) -> None:
  """``a`` and ``b`` (settings of the current and the new plan) in the keys the
  run keeps: a micro-batch under veRL's dynamic batch becomes its token budget
  (the run's, and the new micro-batch x the mean sequence)."""
  if framework != "verl" or not run:
    return
  seq = float(job.prompt_len) + float(job.response.mean)
  for mb, switch, tokens in _VERL_DYNAMIC:
    if not _on(run.get(switch, run.get(_VERL_ACTOR_SWITCH))):
      continue
    old, new = a.pop(mb, None), b.pop(mb, None)
    if new is not None and old != new:
      a[tokens] = run.get(tokens, "(unset)")
      b[tokens] = int(math.ceil(float(new) * seq))


def settings_diff(framework: str, current: cm.Plan, new: cm.Plan, job: cm.RLJob,
                  cluster: cm.Cluster, run_settings: dict | None = None) -> list[str]:
  """What to change in ``framework``'s settings to run ``new`` instead of ``current``:
  ``key: old -> new`` lines, or, where the framework cannot run ``new``, its reason and the
  plan's own settings that change. With ``run_settings`` (the run's own, as imported),
  the changes are in the keys the run keeps (veRL's dynamic batch: token budgets, not
  micro-batches it would ignore)."""
  e = export.get(framework)

  def settings(plan):
    opts = export_options(framework, plan)
    cfg = e.to_config(e.adapt(plan, **opts), job, cluster, **opts)
    if isinstance(cfg, list):  # an argv: --flag [value]
      out, i = {}, 0
      while i < len(cfg):
        value = cfg[i + 1] if i + 1 < len(cfg) and not cfg[i + 1].startswith("--") else True
        out[cfg[i]] = value
        i += 1 if value is True else 2
      return out
    return _flat(cfg)

  try:
    a, b = settings(current), settings(new)
    _as_run_keeps_them(framework, a, b, run_settings, job)
    note = []
  except ValueError as err:
    a = _flat(export.plan_settings(current))
    b = _flat(export.plan_settings(new))
    note = [f"  ({e.framework} cannot run it: {err}; the plan's settings:)"]
  lines = [f"  {k}: {a.get(k, '(unset)')} -> {b.get(k, '(unset)')}"
           for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
  return note + (lines or ["  (same settings)"])


def format_better(framework: str, current: cm.Plan, current_step_s: float, result: Any,
                  job: cm.RLJob, cluster: cm.Cluster, run_settings: dict | None = None) -> str:
  """The searched plans faster than the current run, each as a diff of settings
  (:func:`settings_diff`)."""
  name = export.get(framework).framework
  lines = [f"current {name} run: step {current_step_s:.2f} s  ({export.describe(current)})"]
  better = [(p, e, f) for (p, e), f in zip(result.top, result.top_families, strict=True)
            if float(e.step_time_s) < current_step_s]
  if not better:
    lines.append("no searched plan is faster than the current run")
  for i, (plan, est, family) in enumerate(better, 1):
    t = float(est.step_time_s)
    lines.append(f"better #{i}: step {t:.2f} s ({current_step_s / t:.2f}x faster, {family}); "
                 f"change:")
    lines += settings_diff(framework, current, plan, job, cluster, run_settings)
  return "\n".join(lines)
