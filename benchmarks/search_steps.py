"""The search's gap to the exhaustive optimum against its relaxed starts and steps.

On the 24 enumerable problems of :mod:`benchmarks.search_benchmark` (8 model,
algorithm and cluster structures x 3 job variants, 1.7-94 M plans over every
family, off-policy modes allowed), each problem is enumerated once and searched
with every ``--starts_counts`` x ``--step_counts`` setting (seed 0, no persistent
cache). Prints a markdown table: per problem the plans, the optimum and each
setting's gap and wall time, then the median and worst gap of each setting. The
first problem of each structure compiles (its wall time is cold); the others
reuse the programs. ``--jsonl`` also writes the rows as JSON lines.

Usage, from the repository root::

  python -m benchmarks.search_steps --step_counts 100,200
  python -m benchmarks.search_steps --starts_counts 16,32,64 --step_counts 100
"""

from __future__ import annotations

import json
import time

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import provenance
from benchmarks import search_benchmark

_STEP_COUNTS = flags.DEFINE_list("step_counts", ["100", "200"], "Relaxed step counts to compare.")
_STARTS_COUNTS = flags.DEFINE_list("starts_counts", ["64"],
                                   "Relaxed starts per family to compare.")
_PROBLEMS = flags.DEFINE_integer("problems", 24, "Problems to run (the first N).")
_RESULTS = flags.DEFINE_string("results", "search_steps", "Write the table to benchmarks/results/"
                                "<this>.md with its date, machine and commit ('' to only print).")
_JSONL = flags.DEFINE_string("jsonl", None, "Also write the rows as JSON lines here.")


def _key(setting: tuple[int, int]) -> str:
  """A setting's column suffix: ``64x100`` (starts x steps)."""
  return f"{setting[0]}x{setting[1]}"


def _row(job, cluster, space, settings) -> dict:
  import search  # pylint: disable=g-import-not-at-top
  fams = search.default_families(job)
  exact = {f: search.enumerate_plans(job, cluster, f, space=space, chunk_size=65536)
           for f in fams}
  opt = min(e.best_step_time_s for e in exact.values())
  row = dict(size=sum(e.space_size for e in exact.values()), opt=opt)
  for starts, n in settings:
    t0 = time.perf_counter()
    res = search.optimize(job, cluster, starts=starts, steps=n, seed=0, space=space,
                          max_staleness=1, partial_rollout=True, compilation_cache=False)
    best = float(res.best_estimate.step_time_s) if res.feasible else float("inf")
    row[f"gap{_key((starts, n))}"] = best / opt - 1
    row[f"t{_key((starts, n))}"] = time.perf_counter() - t0
  return row


def main(argv):
  del argv
  settings = [(int(a), int(n)) for a in _STARTS_COUNTS.value for n in _STEP_COUNTS.value]
  space = search_benchmark.benchmark_space()
  rows, previous = [], None
  for label, job, cluster in search_benchmark.benchmark_problems(False)[:_PROBLEMS.value]:
    structure = (job.actor.name, job.algorithm, cluster.n_gpus)
    if structure != previous:
      jax.clear_caches()  # as the benchmark does: compiled code stays mapped otherwise
      previous = structure
    rows.append(dict(label=label, **_row(job, cluster, space, settings)))
    print(json.dumps(rows[-1]), flush=True)
  if _JSONL.value:
    with open(_JSONL.value, "w", encoding="utf-8") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)
  print()
  text = table(rows, settings)
  print(text)
  if _RESULTS.value:
    title = "Gap to the exhaustive optimum against relaxed starts and steps"
    path = provenance.write(_RESULTS.value, title, text + "\n")
    print(f"wrote {path}")


def table(rows: list[dict], settings: list[tuple[int, int]]) -> str:
  """The markdown table of ``rows`` (as :func:`main` prints it); ``settings`` are
  (starts, steps) pairs."""
  steps = [_key(s) for s in settings]
  head = "| problem | plans | optimum (s) | " + " | ".join(
      f"gap, {n} | wall (s), {n}" for n in steps) + " |"
  lines = [head, "|---|---:|---:|" + "---:|---:|" * len(steps)]
  for r in rows:
    cells = " | ".join(f"{100 * r[f'gap{n}']:.2f}% | {r[f't{n}']:.1f}" for n in steps)
    lines.append(f"| {r['label']} | {r['size']:,} | {r['opt']:.2f} | {cells} |")
  for name, fn in (("median", np.median), ("worst", np.max)):
    cells = " | ".join(f"{100 * fn([r[f'gap{n}'] for r in rows]):.2f}% | "
                       f"{np.median([r[f't{n}'] for r in rows]):.1f}" for n in steps)
    lines.append(f"| {name} gap (median wall) | | | {cells} |")
  return "\n".join(lines)


if __name__ == "__main__":
  app.run(main)
