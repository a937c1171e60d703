"""The search's exact programs, compiled and timed on the headline jobs.

A search scores rows with two programs per job (:mod:`search._src.evaluate`):
the ranking program (step time, feasibility, memory excess and per-stage
durations; every row of the discrete phases) and the whole-estimate program
(few rows: the top plans, the rules of thumb). The ranking program costs each
stage once per distinct input of a chunk (:func:`costmodel.internal.estimate_rows`), so
its speed depends on the rows. For each headline job of
:mod:`benchmarks.search_benchmark` this prints the compile time and the time of
one 2,048-row chunk on one core (the process pinned to one core; the search runs
one chunk per core at once), with plans per second per core, on three kinds of
chunk: plans sampled from the families' valid spaces, block sweeps (one plan
with one block's valid rows at its pool sizes, as the discrete phase's sweeps
score them; the mean over every family's blocks) and one plan repeated (what the
per-row assembly costs alone). The same ranking costed row by row (every stage
on every row, without the per-distinct-input factoring) and the whole-estimate
program are timed on the sampled chunk.

Usage, from the repository root (about a minute a job on 2 CPU cores)::

  python -m benchmarks.search_scorer
  python -m benchmarks.search_scorer --jobs=ppo-70b-1024
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import provenance
from benchmarks import search_benchmark

_JOBS = flags.DEFINE_list("jobs", ["grpo-7b-64", "ppo-70b-1024", "dsv3-16384"],
                          "Headline jobs (benchmarks.search_benchmark).")
_RESULTS = flags.DEFINE_string("results", "search_scorer", "Write the table to benchmarks/results/"
                                "<this>.md with its date, machine and commit ('' to only print).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per program (the best is kept).")


def _shared_space(name: str):
  import costmodel as cm  # pylint: disable=g-import-not-at-top
  from search._src import frameworks  # pylint: disable=g-import-not-at-top
  from search._src import shared  # pylint: disable=g-import-not-at-top
  from search._src import space as space_lib  # pylint: disable=g-import-not-at-top
  job, cluster = search_benchmark.headline_job_of(name)
  fw = frameworks.get("any")
  options = space_lib.SpaceOptions()
  spaces = [fw.build(fam, job, cluster, options, prec)
            for fam in frameworks.families_for(job, "any", 0, False)
            for prec in fw.rollout_precisions(options, cluster)]
  return shared.SharedSpace([fs for fs in spaces if fs is not None]), cm.Efficiency()


def _rows(space, chunk: int) -> np.ndarray:
  """``chunk`` sampled valid rows, the families in turn (widened)."""
  from search._src import valid_space  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  per = -(-chunk // len(space.spaces))
  rows = [space.widen(k, valid_space.Blocks(fs).sample(rng, per))
          for k, fs in enumerate(space.spaces)]
  return np.concatenate(rows, 0)[:chunk]


def _sweeps(space, chunk: int) -> list[np.ndarray]:
  """Block sweeps of ``chunk`` rows: per family and block, a sampled plan with
  the block's valid rows at the plan's pool sizes in turn (cycled to fill the
  chunk, as a sweep of fewer rows is padded with copies)."""
  from search._src import valid_space  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  out = []
  for k, fs in enumerate(space.spaces):
    blocks = valid_space.Blocks(fs)
    p = rng.choice(len(blocks.pools), p=blocks.counts / blocks.counts.sum())
    j = int(rng.integers(blocks.counts[p]))
    base = blocks.decode(p, j, j + 1)
    for i, (_, idx) in enumerate(blocks.other):
      valid = blocks.rows_of(p, i)
      rows = np.repeat(base, chunk, 0)
      rows[:, list(idx)] = valid[np.arange(chunk) % len(valid)]
      out.append(space.widen(k, rows))
  return out


def _row_by_row(space, job, cluster, eff, values):
  """The ranking program costing every stage on every row (no factoring), for comparison."""
  from search._src import shared  # pylint: disable=g-import-not-at-top
  out = jax.vmap(lambda v: shared.estimated(space, job, cluster, eff, v))(values)
  return shared.picked(space, values, *zip(*out))


def _time(program, space, eff, values) -> tuple[float, float]:
  args = (space, space.job, space.cluster, eff, jnp.asarray(values))
  t0 = time.perf_counter()
  jax.block_until_ready(program(*args))
  compile_s = time.perf_counter() - t0
  best = np.inf
  for _ in range(_REPEATS.value):
    t0 = time.perf_counter()
    jax.block_until_ready(program(*args))
    best = min(best, time.perf_counter() - t0)
  return compile_s, best


def main(argv) -> None:
  del argv
  # XLA spreads one call over every core it may use; pinned to one core, the
  # figures are per core as the search uses them (one call per core at once).
  if not hasattr(os, "sched_setaffinity"):
    raise SystemExit("search_scorer: this system cannot pin a process to one core "
                     "(os.sched_setaffinity, Linux only), so it cannot time one core")
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
  with provenance.recorded(_RESULTS.value, "The search's exact programs on the headline jobs"):
    _table()


def _table() -> None:
  """Prints the table of compile and call times, one row per job and program."""
  from search._src import compile_cache  # pylint: disable=g-import-not-at-top
  from search._src import evaluate  # pylint: disable=g-import-not-at-top
  from search._src import shared  # pylint: disable=g-import-not-at-top
  chunk = evaluate.DEFAULT_CHUNK
  print(f"{jax.devices()[0].device_kind}, {chunk:,}-row chunks, the process pinned to one core; "
        "plans/s per core\n")
  print("| job | families | program | compile (s) | sampled (ms) | plans/s | block sweeps "
        "(ms, mean) | plans/s | one plan repeated (ms) | plans/s |")
  print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
  row_by_row = jax.jit(_row_by_row, static_argnums=0, compiler_options=compile_cache.FORWARD)
  for name in _JOBS.value:
    space, eff = _shared_space(name)
    values = _rows(space, chunk)
    sweeps = _sweeps(space, chunk)
    same = np.repeat(values[:1], chunk, 0)
    fams = ", ".join(fs.family for fs in space.spaces)
    for label, program, kinds in (("ranking", shared.ranking, 3),
                                  ("ranking, costed row by row", row_by_row, 1),
                                  ("whole estimates", shared.estimates, 1)):
      compile_s, call_s = _time(program, space, eff, values)
      cells = [f"{call_s * 1e3:.1f}", f"{chunk / call_s:,.0f}"]
      if kinds == 3:
        sweep_s = np.mean([_time(program, space, eff, rows)[1] for rows in sweeps])
        same_s = _time(program, space, eff, same)[1]
        cells += [f"{sweep_s * 1e3:.1f} ({len(sweeps)})", f"{chunk / sweep_s:,.0f}",
                  f"{same_s * 1e3:.1f}", f"{chunk / same_s:,.0f}"]
      else:
        cells += ["", "", "", ""]
      print(f"| {name} | {fams} | {label} | {compile_s:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
  app.run(main)
