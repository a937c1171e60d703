"""Cases from a user's own run log: fit the model to one's cluster.

A veRL log's steady-state stage times (medians after the warm-up steps)
become :class:`Case` objects predicted by :func:`costmodel.estimate` for the
(job, plan, cluster) that produced the log, ready for
:func:`costmodel.calibrate`.
"""

from __future__ import annotations

from collections.abc import Sequence
import os

from costmodel._src.fit import measurements
from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.rl_cases import sum_stages
from costmodel._src.fit.validation.rl_cases import shared_estimate
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.plan import Plan
from costmodel._src.step import algorithms


def verl_log_cases(log: str | os.PathLike | Sequence[measurements.StageTimes], job: RLJob,
                   plan: Plan, cluster: Cluster, skip: int = 1) -> list[Case]:
  """Cases for every stage the log timed, plus the whole step.

  Args:
    log: A veRL log path (JSON lines or CSV) or its parsed records.
    job: The job that ran.
    plan: The plan it ran with.
    cluster: The cluster it ran on.
    skip: Warm-up steps left out of the medians.

  Raises:
    ValueError: for a malformed log (see :func:`read_verl_log`) or a log with
      no stage the model predicts.
  """
  records = measurements.read_verl_log(log) if isinstance(log, (str, os.PathLike)) else log
  medians = measurements.steady_state(records, skip=skip)
  colocated = plan.shares_pool("actor")
  mapping = algorithms.verl_log_stages(colocated, "update_weights" in medians)
  cases = []
  for stage, value in medians.items():
    if stage == "step":
      cases.append(Case("log", "rl_step", "step", value, "s",
                        lambda eff: shared_estimate(job, plan, cluster, eff).step_time_s))
    elif stage in mapping and value > 0:
      names = mapping[stage]

      def fn(eff: Efficiency, names=names):
        return sum_stages(shared_estimate(job, plan, cluster, eff), names)

      cases.append(Case("log", "rl_stage", stage, value, "s", fn))
  if not cases:
    raise ValueError(f"verl_log_cases: the log has none of the stages {sorted(mapping)} "
                     "or 'step'")
  return cases
