"""Estimates the step of a plan you have: a plan file or a framework's run.

Prints the job, the plan, the stage breakdown and memory per GPU
(``Estimate.summary()``). Exit status: 0 when the plan fits, 1 when it does
not (naming the stage), 2 on bad input (one line on stderr).

An imported run states its own model path, GPUs, batch and parallel
settings; give what it does not: the mean response length (--response_mean),
and where needed the model (--model or --config_json, when its path names no
known architecture), the GPU type (--gpu) and the mean prompt length
(--prompt_len, instead of its longest prompt).

Examples:
  rlcost-estimate --plan plan.json
  rlcost-estimate --from_verl run.sh --response_mean 900 --model qwen3-8b --gpu H200
  rlcost-estimate --from_nemo_rl grpo.yaml --response_mean 1200 --prompt_len 400
  rlcost-estimate --from_slime run.sh --response_mean 900 --out plan.json --export verl,areal
"""

from __future__ import annotations

import os

from absl import flags

import costmodel as cm
import export
import search
from search._src import cli
from search._src import html_report
from search._src import report

_PLAN = flags.DEFINE_string("plan", None, "Plan file (rlcost-plan --out) to estimate.")


def _inputs() -> tuple[cm.RLJob, cm.Plan, cm.Cluster, str]:
  start = cli.source()
  if start is None and _PLAN.value is None:
    raise ValueError("--plan: give a plan file, or a run with --from_verl / --from_openrlhf / "
                     "--from_nemo_rl / --from_slime / --from_areal")
  if start is not None and _PLAN.value is not None:
    raise ValueError(f"--plan: give a plan file or --from_{start[0]}, not both")
  if start is not None:
    imported = cli.import_run(*start)
    where = "\n".join(x for x in (f"{start[0]} run {start[1]}", cli.not_modelled(imported)) if x)
    return imported.job, imported.plan, imported.cluster, where
  if not os.path.isfile(_PLAN.value):
    raise ValueError(f"--plan: {_PLAN.value!r} is not a file")
  with cli.flag("plan"):
    pf = export.read_plan(_PLAN.value)
  if pf.job is None or pf.cluster is None:
    raise ValueError(f"--plan: {_PLAN.value!r} holds no job or cluster; write it with "
                     "export.write_plan(path, plan, job=job, cluster=cluster)")
  job = pf.job
  options = cli.job_options(job.algorithm)
  if cli.PROMPT_LEN.present:
    options["prompt_len"] = float(cli.PROMPT_LEN.value)
  if options:
    job = job.replace(**options)
  cm.validate_plan(job, pf.plan, pf.cluster)
  return job, pf.plan, pf.cluster, f"plan file {_PLAN.value}"


def main(argv) -> int:
  del argv  # refused by the flag parser when not empty
  out = cli.OUT.value
  cli.check_outputs(out if out is not None else (_PLAN.value if cli.exports_requested() else None))
  job, plan, cluster, where = _inputs()
  est = cm.estimate(job, plan, cluster)
  print(f"{where}\n{report.format_job(job, cluster)}\nplan: {export.describe(plan)}\n", flush=True)
  print(est.summary(), flush=True)
  if out is not None:
    export.write_plan(out, plan, est, job=job, cluster=cluster)
    print(f"wrote {out}")
  plan_file = out if out is not None else _PLAN.value
  if cli.exports_requested():
    print("\n".join(cli.write_exports(plan_file, plan, job, cluster)))
  if cli.report_path():
    rules = search.rules_of_thumb(job, cluster)
    html_report.write(cli.report_path(), job, cluster, plan, est, rules,
                      title=f"rlcost estimate: {where}")
    print(f"wrote {cli.report_path()}")
  if not bool(est.feasible):
    cli.fail_with(1, "the plan does not fit: " + "; ".join(est.violations))
  return 0


# The flags an imported run may need (the rest come from the run).
DEFAULTS = dict(model=None, gpu=None, gpus_per_node=None, prompt_len=None, response_mean=None)


def call(argv: list[str]) -> int:
  """``rlcost-estimate`` with ``argv`` in this process; its exit status."""
  return cli.call(main, "rlcost-estimate", DEFAULTS, argv)


def run():
  """Console entry point (``rlcost-estimate``)."""
  cli.run(main, "rlcost-estimate", __doc__, DEFAULTS)


if __name__ == "__main__":
  run()
