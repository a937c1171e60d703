"""The untimed rest of a colocated RL step: what its stage timers leave out.

A colocated veRL step runs its stages one after the other, so the step time
less the published stage timers (``gen``, ``old_log_prob``, ``update_actor``)
is what no timer covers: the reward, the advantage computation, the driver's
bookkeeping between stages. The prediction is the predicted step less the
same stages, predicted. Group ``rl_rest``: reported stage by stage, never
fitted (a small difference of large numbers).
"""

from __future__ import annotations

from costmodel._src.fit.validation import rl_cases
from costmodel._src.fit.validation.anchors import VERL_STAGES
from costmodel._src.fit.validation.anchors import sum_stages
from costmodel._src.fit.validation.cases import Case
from costmodel._src.ops.efficiency import Efficiency

# The timers of a colocated veRL step; the rest is what they leave out.
TIMERS = ("gen", "old_log_prob", "update_actor")


def rest_case(run: rl_cases.Run) -> Case | None:
  """The rest of ``run``'s step, or None when the run is not colocated or does
  not publish its step and every timer of :data:`TIMERS`."""
  if (run.step_s is None or run.scale != 1.0 or len(run.plan.pools) != 1
      or any(t not in run.stages_s for t in TIMERS)):
    return None
  published = run.step_s - sum(run.stages_s[t] for t in TIMERS)
  if published <= 0.0:
    return None
  names = tuple(n for t in TIMERS for n in VERL_STAGES[t])

  def predict(eff: Efficiency, run=run, names=names):
    est = rl_cases.shared_estimate(run.job, run.plan, run.cluster, eff)
    return est.step_time_s - sum_stages(est, names)

  return Case(run.row_ids[0], "rl_rest", f"{run.label}: rest", published, "s", predict,
              "step less gen, old_log_prob and update_actor, as published and as predicted")


def cases() -> list[Case]:
  """The rest of every colocated run that publishes its step and timers."""
  return [c for c in (rest_case(r) for r in rl_cases.runs()) if c is not None]
