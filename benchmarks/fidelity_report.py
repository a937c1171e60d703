"""Fidelity report: every published row, predicted out of source first.

Leaves each source (a framework's document, a paper, a repository's table, an
issue thread) out in turn, fits the efficiency parameters on the others and
predicts it (:func:`costmodel.validation.validate_by_source`); reports the errors per
stage kind with their signs, per held-out source, stage by stage for every RL
run, the default job's stage breakdown, and every parameter with its
mechanism and source. Writes ``fidelity.md`` and an error plot.

Usage:
  python -m benchmarks.fidelity_report [--out_dir benchmarks/results] [--steps 200]
"""

from __future__ import annotations

import os
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

from benchmarks import fidelity_tables as tables
from benchmarks import provenance
import costmodel as cm

_OUT = flags.DEFINE_string("out_dir", "benchmarks/results", "Output folder.")
_STEPS = flags.DEFINE_integer("steps", 200, "Calibration steps.")
_LOSS = flags.DEFINE_enum("loss", "huber", ["squared", "huber"], "Loss of the log errors.")
_WEIGHTING = flags.DEFINE_enum("weighting", "group", ["case", "group", "row"],
                               "Weight of each case in the loss.")
_PRIORS = flags.DEFINE_list("priors", ["0.01", "0.1", "1"],
                            "Prior weights, chosen by the out-of-source score.")

# Rows with a 0/1 or integer prediction (fits or not, the largest batch that
# fits), assumed lengths (multi-turn) or a difference of large numbers (the
# untimed rest): reported out of source, never fitted.
NOT_FITTED = ("feasibility", "lora_max_batch", "rl_multi_turn", "rl_rest")


def _default_job() -> list[str]:
  """The stage table of ``rlcost-plan`` with no flags (the default job's best plan)."""
  try:
    out = subprocess.run([sys.executable, "-m", "search.plan"], capture_output=True, text=True,
                         timeout=900, check=True).stdout.splitlines()
  except (OSError, subprocess.SubprocessError) as e:
    return [f"(`rlcost-plan` failed: {e})"]
  start = next((i for i, line in enumerate(out) if line.startswith("best plan")), None)
  if start is None:
    return ["(`rlcost-plan` printed no best plan)"]
  end = next((i for i in range(start, len(out)) if out[i].startswith("pool ")), len(out) - 1)
  return ["```", *out[:1], *out[start:end + 1], "```"]


def main(argv):
  del argv
  os.makedirs(_OUT.value, exist_ok=True)
  cases = cm.validation.cases()
  rows = cm.validation.evaluate(cases)
  usable = [c for c, r in zip(cases, rows, strict=True)
            if np.isfinite(r.predicted) and abs(r.error) < 10]
  fit = [c for c in usable if c.group not in NOT_FITTED]
  others = [c for c in usable if c.group in NOT_FITTED]
  v = cm.validation.validate_by_source(fit, steps=_STEPS.value,
                            prior=tuple(float(p) for p in _PRIORS.value), loss=_LOSS.value,
                            weighting=_WEIGHTING.value)
  extra = tables.predict_not_fitted(others, v)
  all_rows = list(v.rows) + extra
  text = [provenance.header("Fidelity report").rstrip("\n"), ""]
  text += tables.method(v, _LOSS.value, _WEIGHTING.value, len(fit), len(others))
  text += tables.kind_table(all_rows) + tables.source_table(all_rows)
  text += tables.stage_table(all_rows)
  text += ["## The default job's best plan (`rlcost-plan`, no flags)", ""]
  text += _default_job()
  text += tables.overhead_notes()
  text += tables.parameter_table(v)
  text += ["## Every row with the default parameters", "", cm.validation.markdown(rows), "",
           "Inferred inputs: mean response lengths "
           + ", ".join(f"{k} {x:.0f} tokens" for k, x in cm.validation.inferred_means().items()),
           "", "Rows left out:", ""]
  text += [f"- {k}: {x}" for k, x in {**cm.validation.SKIPPED, **cm.validation.SKIPPED_RL,
                                       **cm.validation.SKIPPED_MORE}.items()]
  with open(os.path.join(_OUT.value, "fidelity.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(text) + "\n")
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  ok = [r for r in all_rows if r.group not in ("feasibility", "lora_max_batch")]
  fig = cm.plot.error_plot([r.out_of_source for r in ok], [r.published for r in ok],
                           groups=[r.kind for r in ok],
                           quantity="value (own units), out of source")
  fig.savefig(os.path.join(_OUT.value, "fidelity.png"), dpi=120, bbox_inches="tight")
  print("\n".join(text))


if __name__ == "__main__":
  app.run(main)
