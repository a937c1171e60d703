"""Estimates the step of a given plan: from a plan file or a framework run.

Prints the job, the plan, the stage breakdown and memory per GPU
(``Estimate.summary()``); exits 1 when the plan does not fit, 2 on bad input.

  rlcost-estimate --plan plan.json
  rlcost-estimate --from_verl overrides.txt --response_mean 900 --model qwen3-8b
  python -m search.estimate_cli --from_nemo_rl grpo.yaml --response_mean 1200 \
      --report step.html --out plan.json --export verl
"""

from __future__ import annotations

import os
import sys

from absl import flags

import costmodel as cm
import export
import search
from search._src import cli
from search._src import html_report
from search._src import report

_PLAN = flags.DEFINE_string("plan", None, "Plan file (rlcost-plan --out) to estimate.")
_MODEL = flags.DEFINE_string("model", None, "Actor preset, where the run's model path names none.")
_CONFIG_JSON = flags.DEFINE_string("config_json", None,
                                   "Hugging Face config.json of the actor (overrides --model).")
_REWARD_MODEL = flags.DEFINE_string("reward_model", None, "Reward-model preset or config.json.")
_GPU = flags.DEFINE_string("gpu", "H100", "Accelerator preset of an imported run.")
_GPUS_PER_NODE = flags.DEFINE_integer("gpus_per_node", None,
                                      "GPUs per node of an imported run's cluster.")
_RESPONSE_MEAN = flags.DEFINE_float("response_mean", None,
                                    "Mean response tokens (an imported run does not state it).")
_OUT = flags.DEFINE_string("out", None, "Write the (imported) plan, job and estimate as JSON.")


def _inputs() -> tuple[cm.RLJob, cm.Plan, cm.Cluster, str]:
  start = cli.source()
  if (start is None) == (_PLAN.value is None):
    raise ValueError("give one of --plan or --from_verl / --from_openrlhf / --from_nemo_rl / "
                     f"--from_slime / --from_areal (got plan={_PLAN.value!r}, "
                     f"from={start and start[0]!r})")
  if start is not None:
    imported = cli.import_run(*start)
    return imported.job, imported.plan, imported.cluster, f"{start[0]} run {start[1]}"
  if not os.path.isfile(_PLAN.value):
    raise ValueError(f"--plan={_PLAN.value!r} is not a file")
  pf = export.read_plan(_PLAN.value)
  if pf.job is None or pf.cluster is None:
    raise ValueError(f"--plan={_PLAN.value!r} holds no job or cluster; write it with "
                     "export.write_plan(path, plan, job=job, cluster=cluster)")
  job = pf.job
  options = cli.job_options(job.algorithm)
  if options:
    job = job.replace(**options)
  cm.validate_plan(pf.plan, job, pf.cluster)
  return job, pf.plan, pf.cluster, f"plan file {_PLAN.value}"


def main(argv) -> int:
  if len(argv) > 1:
    raise ValueError(f"unexpected argument(s) {argv[1:]}; every input is a --flag")
  out = _OUT.value
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
    print("the plan does not fit: " + "; ".join(est.violations), file=sys.stderr)
    return 1
  return 0


def run():
  """Console entry point (``rlcost-estimate``)."""
  cli.run(main)


if __name__ == "__main__":
  run()
