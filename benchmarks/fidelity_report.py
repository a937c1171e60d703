"""Fidelity report: every published row, predicted out of source first.

Leaves each source (a framework's document, a paper, a repository's table, an
issue thread) out in turn, fits the efficiency parameters on the others and
predicts it (:func:`costmodel.validate_by_source`); reports the errors per
stage kind with their signs, per held-out source, stage by stage for every RL
run, the default job's stage breakdown, and every parameter with its
mechanism and source. Writes ``fidelity.md`` and an error plot.

Usage:
  python -m benchmarks.fidelity_report [--out_dir benchmarks/results] [--steps 200]
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

import costmodel as cm
from benchmarks import fidelity_tables as tables

_OUT = flags.DEFINE_string("out_dir", "benchmarks/results", "Output folder.")
_STEPS = flags.DEFINE_integer("steps", 200, "Calibration steps.")
_LOSS = flags.DEFINE_enum("loss", "huber", ["squared", "huber"], "Loss of the log errors.")
_WEIGHTING = flags.DEFINE_enum("weighting", "group", ["case", "group", "row"],
                               "Weight of each case in the loss.")
_README = flags.DEFINE_string("readme", "", "A README whose block between "
                              "'<!-- accuracy:start -->' and '<!-- accuracy:end -->' is "
                              "replaced by the summary (empty: none).")
_PRIORS = flags.DEFINE_list("priors", ["0.01", "0.1", "1"],
                            "Prior weights, chosen by the out-of-source score.")

# Rows with a 0/1 or integer prediction (fits or not, the largest batch that
# fits), assumed lengths (multi-turn) or a difference of large numbers (the
# untimed rest): reported out of source, never fitted.
NOT_FITTED = ("feasibility", "lora_max_batch", "rl_multi_turn", "rl_rest")


def _header() -> list[str]:
  def git(*args):
    try:
      return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                            timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
      return "unknown"
  commit = git("rev-parse", "--short=12", "HEAD")
  dirty = git("status", "--porcelain", "--untracked-files=no")
  now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, "
             f"Python {platform.python_version()}")
  return [f"# Fidelity report ({now})", "",
          f"`python -m benchmarks.fidelity_report` at commit `{commit}`"
          + (" (with uncommitted changes)" if dirty and dirty != "unknown" else "")
          + f"; {machine}; the model is evaluated on the CPU.", ""]


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


def _write_readme(path: str, lines: list[str]) -> None:
  """Replaces the README's accuracy block by ``lines``.

  Raises:
    ValueError: when the README lacks either marker.
  """
  start, end = "<!-- accuracy:start -->", "<!-- accuracy:end -->"
  with open(path, encoding="utf-8") as f:
    text = f.read()
  if start not in text or end not in text:
    raise ValueError(f"readme={path!r} must hold {start!r} and {end!r}")
  head, rest = text.split(start, 1)
  _, tail = rest.split(end, 1)
  body = "\n".join(line.replace("# Fidelity report", "Fidelity summary", 1) for line in lines)
  with open(path, "w", encoding="utf-8") as f:
    f.write(f"{head}{start}\n{body}\n{end}{tail}")


def main(argv):
  del argv
  os.makedirs(_OUT.value, exist_ok=True)
  cases = cm.validation.cases()
  rows = cm.validation.evaluate(cases)
  usable = [c for c, r in zip(cases, rows, strict=True)
            if np.isfinite(r.predicted) and abs(r.error) < 10]
  fit = [c for c in usable if c.group not in NOT_FITTED]
  others = [c for c in usable if c.group in NOT_FITTED]
  v = cm.validate_by_source(fit, steps=_STEPS.value,
                            prior=tuple(float(p) for p in _PRIORS.value), loss=_LOSS.value,
                            weighting=_WEIGHTING.value)
  extra = tables.predict_not_fitted(others, v)
  all_rows = list(v.rows) + extra
  text = _header()
  text += tables.method(v, _LOSS.value, _WEIGHTING.value, len(fit), len(others))
  summary = tables.kind_table(all_rows) + tables.source_table(all_rows)
  text += summary
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
  if _README.value:
    _write_readme(_README.value, text[:3] + summary)
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
