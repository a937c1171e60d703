"""Text reports of a search: families, top plans, rules of thumb."""

from __future__ import annotations

import math

import numpy as np

import costmodel as cm
from export import describe
from search._src.result import SearchResult


def _fmt_s(x: float) -> str:
  return f"{x:10.2f}" if math.isfinite(x) else f"{'-':>10}"


def format_result(result: SearchResult, rules: tuple[SearchResult, ...] = ()) -> str:
  """The search's families, top plans with the best plan's stage breakdown,
  and the rules of thumb with the searched plan's speed-up over each."""
  lines = [f"search: {result.wall_time_s:.1f} s, {result.evaluations:,} exact evaluations", "",
           f"{'family':<22}{'relaxed (s)':>12}{'rounded (s)':>12}"]
  for fam in result.history:
    lines.append(f"{fam:<22}{_fmt_s(result.relaxed_bound_s.get(fam, float('nan'))):>12}"
                 f"{_fmt_s(result.best_by_family_s.get(fam, float('inf'))):>12}")
  lines.append("")
  if not result.feasible:
    lines.append(f"INFEASIBLE: {result.infeasible_reason}")
    return "\n".join(lines)
  lines.append("top plans:")
  for k, ((plan, est), fam) in enumerate(zip(result.top, result.top_families, strict=True)):
    lines.append(f"#{k + 1} {float(est.step_time_s):8.2f} s  {fam:<20} {describe(plan)}")
  lines += ["", f"best plan ({result.family}):", result.best_estimate.summary()]
  if rules:
    best = float(result.best_estimate.step_time_s)
    lines += ["", "rules of thumb:",
              f"{'rule':<10}{'family':<22}{'step (s)':>10}{'speed-up':>10}  layout"]
    for r in rules:
      speed = r.best_step_time_s / best if r.feasible else float("nan")
      layout = describe(r.best_plan) if r.feasible else "does not fit"
      lines.append(f"{r.method:<10}{r.family or '-':<22}{_fmt_s(r.best_step_time_s)}"
                   f"{(f'{speed:9.2f}x' if np.isfinite(speed) else '        -')}  {layout}")
  return "\n".join(lines)


def format_job(job: cm.RLJob, cluster: cm.Cluster) -> str:
  """One line each for the job and the cluster."""
  return (f"job: {job.algorithm} {job.actor.name}, {float(job.prompts_per_step):g} prompts x "
          f"{float(job.samples_per_prompt):g} samples, prompt {float(job.prompt_len):g}, "
          f"response mean {float(job.response.mean):.0f} max {float(job.response.max):.0f}\n"
          f"cluster: {cluster.nodes} x {cluster.gpus_per_node} {cluster.accelerator.name} "
          f"({cluster.n_gpus} GPUs)")
