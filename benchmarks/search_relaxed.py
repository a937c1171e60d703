"""What the relaxed (gradient) phase adds: the search with and without it.

For each job, one process compiles both variants once, then for every seed
times ``search.optimize(relaxed="on")`` and ``relaxed="off"`` (warm) and
prints the best step time each found; with ``--enumerable``, the 24
enumerable problems of ``search_benchmark`` (every mode allowed), each
variant's gap to the exhaustive optimum. ``optimize``'s ``relaxed="auto"``
rule (:data:`search._src.methods.gradient.RELAX_MIN_PLANS`) rests on these figures.

  python -m benchmarks.search_relaxed --seeds 4
  python -m benchmarks.search_relaxed --enumerable --ablation_jobs=
  python -m benchmarks.search_relaxed --seeds 2 --ablation_jobs=mixtral-8x7b-64,...  # _MORE
"""

from __future__ import annotations

import time

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import provenance
from benchmarks import search_benchmark
from benchmarks import search_large

_JOBS = ("grpo-7b-64", *search_large.JOBS)
# More GRPO jobs for a wider look at the rule (``--ablation_jobs=...``):
# name -> (model, GPUs, prompts, samples per prompt, mean and max response).
_MORE = {
    "mixtral-8x7b-64": ("mixtral-8x7b", 64, 512, 8, 2000.0, 8192.0),
    "qwen3-30b-a3b-128": ("qwen3-30b-a3b", 128, 512, 16, 4000.0, 16384.0),
    "qwen3-30b-a3b-512": ("qwen3-30b-a3b", 512, 1024, 16, 4000.0, 16384.0),
    "qwen2.5-32b-256": ("qwen2.5-32b", 256, 1024, 8, 2000.0, 8192.0),
    "llama-3.1-70b-512": ("llama-3.1-70b", 512, 1024, 8, 2000.0, 8192.0),
    "llama-3.1-405b-1024": ("llama-3.1-405b", 1024, 1024, 8, 2000.0, 8192.0),
}
_RESULTS = flags.DEFINE_string("results", "search_relaxed", "Write the table to benchmarks/results/"
                                "<this>.md with its date, machine and commit ('' to only print).")
_SEEDS = flags.DEFINE_integer("seeds", 4, "Seeds per job.")
_ABLATION_JOBS = flags.DEFINE_list("ablation_jobs", list(_JOBS),
                                   "Jobs compared seed by seed (empty: none).")
_ENUMERABLE = flags.DEFINE_bool("enumerable", False, "The 24 enumerable problems.")


def _job(name: str):
  if name in _MORE:
    import costmodel as cm  # pylint: disable=g-import-not-at-top
    model, gpus, prompts, samples, mean, longest = _MORE[name]
    job = cm.RLJob("grpo", cm.models.get(model), prompts_per_step=float(prompts),
                   samples_per_prompt=float(samples), prompt_len=1024.0,
                   response=cm.ResponseLength.from_mean_max(mean, longest))
    return job, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=gpus // 8)
  if name == "grpo-7b-64":
    return search_benchmark.headline_job_of(name)
  return search_large.job(name, search_benchmark.headline_job_of)


def _timed(job, cluster, **kw):
  import search  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  res = search.optimize(job, cluster, **kw)
  return res.best_step_time_s, time.perf_counter() - t0, res


def _jobs(names, seeds: int) -> None:
  print("| job | largest family (value vectors) | seed | with (s) | without (s) | with: warm "
        "wall (s) | without: warm wall (s) |\n|---|---:|---:|---:|---:|---:|---:|", flush=True)
  from search._src import frameworks  # pylint: disable=g-import-not-at-top
  for name in names:
    job, cluster = _job(name)
    fw = frameworks.get("any")
    size = max(float(fs.size) for f in frameworks.families_for(job, "any")
               if (fs := fw.build(f, job, cluster, None, "bf16")) is not None)
    for relaxed in ("on", "off"):  # compile both
      _timed(job, cluster, relaxed=relaxed)
    for seed in range(seeds):
      on, on_s, _ = _timed(job, cluster, seed=seed, relaxed="on")
      off, off_s, _ = _timed(job, cluster, seed=seed, relaxed="off")
      print(f"| {name} | {size:.2e} | {seed} | {on:.2f} | {off:.2f} | {on_s:.1f} | {off_s:.1f} |",
            flush=True)
    jax.clear_caches()


def _enumerable() -> None:
  import search  # pylint: disable=g-import-not-at-top
  space = search_benchmark.benchmark_space()
  print("| problem | optimum (s) | gap with | gap without | with: warm wall (s) | without: "
        "warm wall (s) |\n|---|---:|---:|---:|---:|---:|", flush=True)
  gaps = {"on": [], "off": []}
  previous = None
  for label, job, cluster in search_benchmark.benchmark_problems(False):
    structure = (job.actor.name, job.algorithm, cluster.n_gpus)
    if structure != previous:
      jax.clear_caches()
      previous = structure
    opt = min(search.enumerate_plans(job, cluster, f, space=space,
                                     chunk_size=65536).best_step_time_s
              for f in search.default_families(job))
    row = {}
    for relaxed in ("on", "off"):
      kw = dict(space=space, max_staleness=1, partial_rollout=True, relaxed=relaxed)
      _timed(job, cluster, **kw)
      best, wall, _ = _timed(job, cluster, **kw)
      row[relaxed] = (best / opt - 1, wall)
      gaps[relaxed].append(best / opt - 1)
    print(f"| {label} | {opt:.2f} | {row['on'][0]:.2%} | {row['off'][0]:.2%} | "
          f"{row['on'][1]:.1f} | {row['off'][1]:.1f} |", flush=True)
  for relaxed, g in gaps.items():
    print(f"{relaxed}: median gap {np.median(g):.2%}, worst {np.max(g):.2%}")


def main(argv) -> None:
  del argv
  with provenance.recorded(_RESULTS.value, "The search with and without its relaxed phase"):
    if _ABLATION_JOBS.value:
      _jobs(_ABLATION_JOBS.value, _SEEDS.value)
    if _ENUMERABLE.value:
      _enumerable()


if __name__ == "__main__":
  app.run(main)
