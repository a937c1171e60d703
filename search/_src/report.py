"""Text reports of a search: families, top plans, rules of thumb."""

from __future__ import annotations

import math

import numpy as np

import costmodel as cm
from export import describe
from search._src import result as result_lib
from search._src.result import SearchResult


def _fmt_s(x: float) -> str:
  return f"{x:10.2f}" if math.isfinite(x) else f"{'-':>10}"


def format_result(result: SearchResult, rules: tuple[SearchResult, ...] = ()) -> str:
  """The search's families, top plans (each with what differs from the best)
  with the best plan's stage breakdown, the best on-policy plan when
  off-policy modes were allowed, and the rules of thumb with the speed-up of
  the searched plan of the same mode (synchronous rules: the best on-policy
  plan) over each."""
  lines = [f"search: {result.wall_time_s:.1f} s ({result.compile_time_s:.1f} s compiling, "
           f"{result.search_time_s:.1f} s searching), {result.evaluations:,} exact evaluations, "
           f"framework {result.framework}, relaxed phase {'on' if result.relaxed else 'off'}",
           "",
           f"{'family':<22}{'relaxed (s)':>12}{'rounded (s)':>12}"]
  for fam in result.history:
    lines.append(f"{fam:<22}{_fmt_s(result.relaxed_bound_s.get(fam, float('nan'))):>12}"
                 f"{_fmt_s(result.best_by_family_s.get(fam, float('inf'))):>12}")
  lines += [f"skipped {why}" for why in result.skipped.values()]
  lines.append("")
  if not result.feasible:
    lines.append(f"INFEASIBLE: {result.infeasible_reason}")
    return "\n".join(lines)
  lines.append("top plans:")
  best_plan, best_fam = result.best_plan, result.family
  for k, ((plan, est), fam) in enumerate(zip(result.top, result.top_families, strict=True)):
    lines.append(f"#{k + 1} {float(est.step_time_s):8.2f} s  {fam:<20} {describe(plan)}")
    if k:
      lines.append(f"{'':14}vs #1: {result_lib.differences(plan, fam, best_plan, best_fam)}")
  accepted = ", ".join(result.accepted_by) or "none of the exporters"
  lines += ["", f"best plan ({result.family}), accepted by {accepted}:",
            result.best_estimate.summary()]
  sync = result
  if result.on_policy is not None:
    sync = result.on_policy
    if sync.feasible:
      lines += ["", f"best on-policy plan: {sync.best_step_time_s:.2f} s  {sync.family:<20} "
                f"{describe(sync.best_plan)}"]
    else:
      lines += ["", "best on-policy plan: none found"]
  if rules:
    lines += ["", "rules of thumb: speed-up of the searched plan of the same mode",
              f"{'rule':<10}{'family':<22}{'step (s)':>10}{'speed-up':>10}  layout"]
    for r in rules:
      same = result if r.feasible and r.best_plan.mode.staleness > 0 else sync
      best = same.best_step_time_s
      speed = r.best_step_time_s / best if r.feasible and same.feasible else float("nan")
      layout = (describe(r.best_plan) if r.feasible else
                next(iter(r.skipped.values()), "does not fit"))
      lines.append(f"{r.method:<10}{r.family or '-':<22}{_fmt_s(r.best_step_time_s)}"
                   f"{(f'{speed:9.2f}x' if np.isfinite(speed) else '        -')}  {layout}")
  return "\n".join(lines)


def format_job(job: cm.RLJob, cluster: cm.Cluster) -> str:
  """One line each for the job and the cluster."""
  return (f"job: {job.algorithm} {job.actor.name}, {float(job.prompts_per_step):g} prompts x "
          f"{float(job.samples_per_prompt):g} samples, prompt {float(job.prompt_len):g}, "
          f"response mean {float(job.response.mean):.0f} max {float(job.response.max):.0f}\n"
          f"cluster: {cluster.nodes} x {cluster.gpus_per_node} {cluster.accelerator.name} "
          f"({cluster.n_gpus} GPU{'' if cluster.n_gpus == 1 else 's'})")


def format_next(accepted_by: tuple[str, ...], out: str | None, report_path: str | None,
                written: list[str]) -> str:
  """How to run the best plan: the files written for the frameworks that accept
  it (a command to run, or a config to launch with), or the flags that write them."""
  lines = ["to run the best plan:"]
  files = [w.removeprefix("wrote ") for w in written if w.startswith("wrote ")]
  for path in files:
    lines.append(f"  bash {path}" if path.endswith(".sh") else
                 f"  {path}: the framework's config (give it to its launcher)")
  lines += [f"  {w}" for w in written if not w.startswith("wrote ")]
  if not files:
    frameworks = ",".join(accepted_by) or "verl"
    what = ("each framework's command or config next to it" if out else
            "the plan and each framework's command or config")
    lines.append(f"  add {'' if out else '--out plan.json '}--export {frameworks} to write {what}"
                 + ("" if accepted_by else " (no exporter accepts this plan: try --framework)"))
  if report_path is None:
    lines.append("  add --report plan.html for an HTML report of the plan")
  return "\n".join(lines)
