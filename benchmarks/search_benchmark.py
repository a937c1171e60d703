"""Benchmarks of the layout search: speed, scale and quality.

Prints (and writes with ``--out``) a markdown report:

1. exact plan evaluations per second (one jitted, vmapped call per chunk, after
   compilation) on this machine;
2. search wall time, cold (a fresh process: compilation included) and warm,
   with peak memory (``ru_maxrss``), for GRPO on Qwen2.5-7B on 64 GPUs, PPO on
   Llama-3.1-70B with four roles (actor, reference, critic and a 70B reward
   model) on 1,024 GPUs, and GRPO on DeepSeek-V3 on 16,384 GPUs; each next to
   the rules of thumb;
3. quality on problems small enough to enumerate: the gap of the searched plan
   to the exhaustive optimum over the same discrete space (every family), the
   gaps of random search and simulated annealing given the search's (warm) wall
   time, and the searched plan's predicted speed-up over each rule of thumb.

Usage, from the repository root (about 20-30 minutes on 2 CPU cores)::

  python -m benchmarks.search_benchmark   # writes benchmarks/results/search_benchmark.md
  python -m benchmarks.search_benchmark --quick   # 4 problems, no headline jobs
  python -m benchmarks.search_benchmark --large  # large spaces, proven floors: search_large.md
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import provenance
from benchmarks import search_large
from search._src import optimize as optimize_lib

_OUT = flags.DEFINE_string("out", None, "Write the markdown report here (a full run writes "
                           "benchmarks/results/search_benchmark.md, --large "
                           "benchmarks/results/search_large.md, without it).")
_QUICK = flags.DEFINE_bool("quick", False, "A few quality problems, no headline jobs.")
_SKIP_HEADLINE = flags.DEFINE_bool("skip_headline", False, "Skip the headline jobs.")
_THROUGHPUT = flags.DEFINE_bool("throughput", False, "Only the exact evaluations per second.")
_STARTS = flags.DEFINE_integer("starts", optimize_lib.DEFAULT_STARTS, "Search starts per family.")
_STEPS = flags.DEFINE_integer("steps", 100, "Relaxed steps.")

# The quality problems: (model, algorithm, nodes of 8 GPUs) x job variants.
_STRUCTURES = (
    ("qwen2.5-1.5b", "grpo", 1),
    ("qwen2.5-1.5b", "grpo", 2),
    ("qwen2.5-7b", "grpo", 2),
    ("qwen2.5-7b", "dapo", 4),
    ("llama-3.1-8b", "rloo", 4),
    ("qwen3-8b", "reinforce_pp", 1),
    ("qwen3-14b", "grpo", 8),
    ("qwen2.5-1.5b", "remax", 2),
)
# (prompt_len, response mean, response max, prompts, samples per prompt)
_VARIANTS = (
    (512, 1000, 4096, 64, 8),
    (1024, 2000, 8192, 256, 8),
    (2048, 4000, 16384, 128, 16),
)


def benchmark_space():
  import search  # pylint: disable=g-import-not-at-top
  return search.SpaceOptions(max_pp=4, micro_batches=(1, 2, 4, 8, 16), engine_max_pp=2,
                             memory_fractions=(0.5, 0.6, 0.7, 0.8, 0.9),
                             max_seqs=(64, 256, 1024, 4096))


def headline_job_of(name: str):
  import costmodel as cm  # pylint: disable=g-import-not-at-top
  if name == "grpo-7b-64":
    job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                   samples_per_prompt=8.0, prompt_len=1024.0,
                   response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
    return job, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=8)
  if name == "ppo-70b-1024":
    m = cm.models.get("llama-3.1-70b")
    job = cm.RLJob("ppo", m, prompts_per_step=1024.0, samples_per_prompt=4.0,
                   prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(2000.0, 8192.0),
                   reward_model=m)
    return job, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=128)
  if name == "dsv3-16384":
    job = cm.RLJob("grpo", cm.models.get("deepseek-v3"), prompts_per_step=4096.0,
                   samples_per_prompt=16.0, prompt_len=1024.0,
                   response=cm.ResponseLength.from_mean_max(4000.0, 16384.0))
    return job, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2048)
  raise ValueError(f"unknown headline job {name!r}")


def _headline_child(name: str, starts: int, steps: int) -> None:
  """Runs in a fresh process: cold search, warm search, rules; prints JSON."""
  import search  # pylint: disable=g-import-not-at-top
  job, cluster = headline_job_of(name)
  t0 = time.perf_counter()
  # A cold process without the persistent cache: compilation included.
  res = search.optimize(job, cluster, starts=starts, steps=steps, seed=0,
                        compilation_cache=False)
  cold = time.perf_counter() - t0
  compile_s = res.compile_time_s
  rss_search = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  t0 = time.perf_counter()
  search.optimize(job, cluster, starts=starts, steps=steps, seed=0, compilation_cache=False)
  warm = time.perf_counter() - t0
  rules = search.rules_of_thumb(job, cluster)
  best = float(res.best_estimate.step_time_s) if res.feasible else float("inf")
  print(json.dumps({
      "name": name, "cold_s": cold, "compile_s": compile_s, "warm_s": warm,
      "evaluations": res.evaluations,
      "family": res.family, "best_s": best, "relaxed": res.relaxed_bound_s,
      "rounded": {k: (v if np.isfinite(v) else None) for k, v in res.best_by_family_s.items()},
      "maxrss_bytes": rss_search,
      "rules": {r.method: (r.best_step_time_s if r.feasible else None) for r in rules},
  }))


def _run_headline(name: str) -> dict:
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, "-m", "benchmarks.search_benchmark",
                        f"--headline_job={name}", f"--starts={_STARTS.value}",
                        f"--steps={_STEPS.value}"],
                       capture_output=True, text=True, env=env, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


_HEADLINE = flags.DEFINE_string("headline_job", None, "(internal) run one headline job.")
_LARGE = flags.DEFINE_bool("large", False, "Only the large-space comparison at equal wall time "
                           "(benchmarks/search_large.py).")
_LARGE_SEEDS = flags.DEFINE_integer("large_seeds", 10, "Seeds per job, warm.")
_LARGE_COLD = flags.DEFINE_integer("large_cold_seeds", 3, "Seeds per job, cold.")
_LARGE_JOBS = flags.DEFINE_list("large_jobs", None, "Large jobs to run (default: all).")
_LARGE_BOUNDS = flags.DEFINE_bool("large_bounds", True, "With --large: each job's family "
                                   "bounds and enumerable optima too.")
_LARGE_JOB = flags.DEFINE_string("large_job", None, "(internal) one large job.")
_LARGE_METHOD = flags.DEFINE_string("large_method", None, "(internal) one cold run's method, "
                                    "or 'bound': the job's family bounds.")
_LARGE_SEED = flags.DEFINE_integer("large_seed", 0, "(internal) one cold run's seed.")
_LARGE_BUDGET = flags.DEFINE_float("large_budget", 0.0, "(internal) one cold run's budget.")


def _throughput() -> list[tuple]:
  """Exact evaluations per second of enumeration's scorer (rows labelled by the
  options of each block they take, the stages one block decides looked up in
  tables), 262,144 plans in 16,384-row chunks on every core, the best of seven
  passes: ``(label, sampled, enumeration order, enumeration order without
  tables, seconds to build the tables)``, the plans drawn uniformly from the
  valid space (few shared stage inputs) and the first ones of the largest
  pool-size block in enumeration order (what :func:`search.enumerate_plans`
  scores)."""
  import costmodel as cm  # pylint: disable=g-import-not-at-top
  from search._src import evaluate  # pylint: disable=g-import-not-at-top
  from search._src import space as space_lib  # pylint: disable=g-import-not-at-top
  from search._src import stage_tables  # pylint: disable=g-import-not-at-top
  from search._src import valid_space  # pylint: disable=g-import-not-at-top
  job, cluster = headline_job_of("grpo-7b-64")
  ppo = cm.RLJob("ppo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                 samples_per_prompt=8.0, reward_model=cm.models.get("qwen2.5-1.5b"))
  rows = []
  # Every family: GRPO's four and PPO's three-pool split.
  for label, j, fam in (("GRPO 7B, colocated", job, "colocated"), ("GRPO 7B, split", job, "split"),
                        ("GRPO 7B, split_async", job, "split_async"),
                        ("GRPO 7B, split_async_partial", job, "split_async_partial"),
                        ("PPO 7B + 1.5B RM, split3", ppo, "split3")):
    fs = space_lib.build(fam, j, cluster, benchmark_space())
    blocks = valid_space.Blocks(fs)
    p = int(np.argmax(blocks.counts))
    n = min(262_144, int(blocks.counts[p]) // 16384 * 16384)
    t0 = time.perf_counter()
    tables = stage_tables.build(fs, blocks)
    build_s = time.perf_counter() - t0
    sampled = blocks.sample(np.random.default_rng(0), 262_144, labels=True)
    ordered = blocks.decode(p, 0, n, labels=True)
    rates = []
    for t, (values, labels) in ((tables, sampled), (tables, ordered), ({}, ordered)):
      ev = evaluate.Evaluator(fs, chunk=16384, label_of=blocks.label_of, tables=t)
      ev.scores(values[:16384], labels=labels[:16384])  # compile
      best = np.inf
      for _ in range(7):  # the best of seven passes: a pass is 0.01-0.1 s
        t0 = time.perf_counter()
        ev.scores(values, labels=labels)
        best = min(best, time.perf_counter() - t0)
      rates.append(len(values) / best)
    rows.append((f"{label} (64 GPUs; {blocks.size:.1e} plans)", *rates, build_s))
  return rows


def benchmark_problems(quick: bool):
  import costmodel as cm  # pylint: disable=g-import-not-at-top
  out = []
  structures = _STRUCTURES[:2] if quick else _STRUCTURES
  variants = _VARIANTS[:2] if quick else _VARIANTS
  for model, alg, nodes in structures:
    for prompt, mean, mx, prompts, samples in variants:
      job = cm.RLJob(alg, cm.models.get(model), prompts_per_step=float(prompts),
                     samples_per_prompt=float(samples), prompt_len=float(prompt),
                     response=cm.ResponseLength.from_mean_max(float(mean), float(mx)))
      cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=nodes)
      label = f"{model} {alg} {nodes * 8} GPUs p{prompt} r{mean}/{mx} {prompts}x{samples}"
      out.append((label, job, cluster))
  return out


def _quality(quick: bool) -> list[dict]:
  import search  # pylint: disable=g-import-not-at-top
  space = benchmark_space()
  rows = []
  previous = None
  for label, job, cluster in benchmark_problems(quick):
    structure = (job.actor.name, job.algorithm, cluster.n_gpus)
    if structure != previous:
      # Every compiled executable keeps its code mapped; release those of the
      # previous structure (the kernel's map count limit is ~65k mappings).
      jax.clear_caches()
      previous = structure
    fams = search.default_families(job)
    t0 = time.perf_counter()
    # Every mode: the enumeration covers every family that applies.
    modes = dict(max_staleness=1, partial_rollout=True)
    exact = search.run("enumerate", job, cluster, families=fams, space=space, **modes)
    enum_s = time.perf_counter() - t0
    size, opt = exact.space_size, exact.best_step_time_s
    t0 = time.perf_counter()
    res = search.optimize(job, cluster, starts=_STARTS.value, steps=_STEPS.value, seed=0,
                          space=space, compilation_cache=False, **modes)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = search.optimize(job, cluster, starts=_STARTS.value, steps=_STEPS.value, seed=0,
                          space=space, compilation_cache=False, **modes)
    warm = time.perf_counter() - t0
    best = float(res.best_estimate.step_time_s) if res.feasible else np.inf
    # The methods that run until stopped, given the search's warm wall time, then
    # its number of exact evaluations, over every family in turn.
    gap_time, gap_evals = {}, {}
    for m in sampled_methods():
      at_time = search.method(m, **_AT_TIME.get(m, {}))
      gap_time[m] = search.run(at_time, job, cluster, families=fams, budget_s=warm, seed=0,
                               space=space, **modes).best_step_time_s / opt - 1
      at_evals = search.method(m, **_AT_EVALUATIONS.get(m, {}))
      gap_evals[m] = search.run(at_evals, job, cluster, families=fams,
                                max_evaluations=max(res.evaluations, 1), seed=0, space=space,
                                **modes).best_step_time_s / opt - 1
    rules = {r.method: r.best_step_time_s
             for r in search.rules_of_thumb(job, cluster, max_staleness=1, partial_rollout=True)}
    row = dict(label=label, size=size, enum_s=enum_s, opt=opt, best=best, cold=cold, warm=warm,
               gap=best / opt - 1, gap_time=gap_time, gap_evals=gap_evals,
               family=res.family, rules={k: v / best for k, v in rules.items()},
               evaluations=res.evaluations)
    rows.append(row)
    others = ", ".join(f"{m} {gap_time[m]:.2%} / {gap_evals[m]:.2%}" for m in gap_time)
    print(f"{label}: opt {opt:.2f} s, search {best:.2f} s (gap {row['gap']:.2%}); at equal time "
          f"/ evaluations ({res.evaluations:,}): {others}; warm {warm:.1f} s", flush=True)
  return rows


def _pct(x: float) -> str:
  return f"{100 * x:.2f}%" if np.isfinite(x) else "none found"


def _report(throughput, headline, quality) -> str:
  lines = [f"Machine: {os.cpu_count()} CPU cores; JAX on CPU. "
           f"Starts {_STARTS.value}, relaxed steps {_STEPS.value}.", ""]
  lines += ["## Exact evaluations per second (after compilation, chunks of 16,384)", "",
            "| problem | evaluations / s, sampled | evaluations / s, enumeration order "
            "| enumeration order without tables | tables built in (s) |",
            "|---|---:|---:|---:|---:|"]
  lines += [f"| {label} | {a:,.0f} | {b:,.0f} | {c:,.0f} | {t:.1f} |"
            for label, a, b, c, t in throughput]
  if headline:
    lines += ["", "## Search wall time (on-policy families, framework any; areal: not in "
              "the mode)", "",
              "| job | cold (s) | of which compiling (s) | warm (s) | peak RSS (GB) | exact evals "
              "| best family | step (s) "
              "| relaxed (s) | " + " | ".join(f"vs {r}" for r in ("verl", "openrlhf", "areal",
                                                                     "kv_fit")) + " |",
              "|---|---:|---:|---:|---:|---:|---|---:|---:|" + "---:|" * 4]
    for h in headline:
      relaxed = h["relaxed"].get(h["family"], float("nan")) if h["family"] else float("nan")
      speed = []
      for r in ("verl", "openrlhf", "areal", "kv_fit"):
        v = h["rules"].get(r)
        speed.append("-" if r not in h["rules"] else
                     f"{v / h['best_s']:.2f}x" if v else "does not fit")
      lines.append(f"| {h['name']} | {h['cold_s']:.1f} | {h.get('compile_s', 0):.1f} | "
                   f"{h['warm_s']:.1f} | "
                   f"{h['maxrss_bytes'] / 1e9:.2f} | {h['evaluations']:,} | {h['family']} | "
                   f"{h['best_s']:.2f} | {relaxed:.2f} | " + " | ".join(speed) + " |")
  if quality:
    gaps = np.asarray([q["gap"] for q in quality])
    sampled = list(quality[0]["gap_time"])
    lines += ["", f"## Quality on {len(quality)} enumerable problems", "",
              "Gap = step time of the plan found / exhaustive optimum over the same space "
              "(every family) - 1. The registered methods that run until stopped "
              f"({', '.join(sampled)}) get either the search's warm wall time or its number of "
              "exact evaluations, over every family in turn.",
              "", "| | median | 90th percentile | max |", "|---|---:|---:|---:|"]
    rows = [("gradient search", gaps)]
    for key, what in (("gap_time", "equal time"), ("gap_evals", "equal evaluations")):
      rows += [(f"{m}, {what}", np.asarray([q[key][m] for q in quality])) for m in sampled]
    for name, g in rows:
      lines.append(f"| {name} | {_pct(np.median(g))} | {_pct(np.percentile(g, 90))} | "
                   f"{_pct(np.max(g))} |")
    lines += ["", "| rule of thumb | median speed-up of the searched plan | min | max |",
              "|---|---:|---:|---:|"]
    for r in ("verl", "openrlhf", "areal", "kv_fit"):
      s = np.asarray([q["rules"][r] for q in quality if np.isfinite(q["rules"][r])])
      if len(s):
        lines.append(f"| {r} | {np.median(s):.2f}x | {s.min():.2f}x | {s.max():.2f}x |")
    lines += ["", "| problem | plans | optimum (s) | search (s) | gap | " + " | ".join(
        f"{m} gap (time / evals)" for m in sampled) + " | search evals | family | cold (s) | "
              "warm (s) |", "|---|---:|---:|---:|---:|" + "---:|" * len(sampled)
              + "---:|---|---:|---:|"]
    for q in quality:
      others = " | ".join(f"{_pct(q['gap_time'][m])} / {_pct(q['gap_evals'][m])}"
                          for m in sampled)
      lines.append(f"| {q['label']} | {q['size']:,} | {q['opt']:.2f} | {q['best']:.2f} | "
                   f"{_pct(q['gap'])} | {others} | {q['evaluations']:,} | "
                   f"{q['family']} | {q['cold']:.1f} | {q['warm']:.1f} |")
    lines += ["", f"Peak RSS of the quality run: "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9:.2f} GB."]
  return "\n".join(lines) + "\n"


# Settings of the sampled methods at equal wall time and at equal evaluations
# (a method the registry adds runs with its defaults).
_AT_TIME = {"random": dict(batch=8192), "annealing": dict(chains=2048)}
_AT_EVALUATIONS = {"random": dict(batch=8192), "annealing": dict(chains=256)}


def sampled_methods() -> tuple[str, ...]:
  """The registered methods that run until stopped (compared at equal time
  and equal evaluations)."""
  import search  # pylint: disable=g-import-not-at-top
  return tuple(m for m in search.METHODS if search.method(m).anytime)


def main(argv):
  del argv
  if _HEADLINE.value:
    _headline_child(_HEADLINE.value, _STARTS.value, _STEPS.value)
    return 0
  if _LARGE_JOB.value:
    if _LARGE_METHOD.value == "bound":
      out = search_large.bounds_child(_LARGE_JOB.value, headline_job_of)
    elif _LARGE_METHOD.value:
      out = search_large.cold_child(_LARGE_JOB.value, _LARGE_METHOD.value, _LARGE_SEED.value,
                                    _LARGE_BUDGET.value, headline_job_of)
    else:
      out = search_large.warm_child(_LARGE_JOB.value, _LARGE_SEEDS.value, headline_job_of)
    print(json.dumps(out))
    return 0
  if _LARGE.value:
    data = search_large.run(_LARGE_SEEDS.value, _LARGE_COLD.value,
                            tuple(_LARGE_JOBS.value or search_large.JOBS),
                            bounds=_LARGE_BOUNDS.value)
    text = search_large.report(data, time.strftime("%Y-%m-%d"))
    print(text)
    _write(text, "search_large", "Large spaces: the gradient search against the baselines")
    return 0
  throughput = _throughput()
  for label, a, b, c, t in throughput:
    print(f"{label}: {a:,.0f} evaluations/s sampled, {b:,.0f} in enumeration order "
          f"({c:,.0f} without tables; tables built in {t:.1f} s)", flush=True)
  if _THROUGHPUT.value:
    return 0
  headline = []
  if not (_QUICK.value or _SKIP_HEADLINE.value):
    for name in ("grpo-7b-64", "ppo-70b-1024", "dsv3-16384"):
      headline.append(_run_headline(name))
      print(json.dumps(headline[-1]), flush=True)
  quality = _quality(_QUICK.value)
  text = _report(throughput, headline, quality)
  print(text)
  _write(text, None if (_QUICK.value or _SKIP_HEADLINE.value) else "search_benchmark",
         "Layout search benchmark")
  return 0


def _write(text: str, name: str | None, title: str) -> None:
  """The report with its provenance, to ``--out`` or else (a full run) to the current
  results file ``benchmarks/results/<name>.md``."""
  if _OUT.value:
    with open(_OUT.value, "w", encoding="utf-8") as f:
      f.write(provenance.header(title) + text)
  elif name:
    print(f"wrote {provenance.write(name, title, text)}")


if __name__ == "__main__":
  app.run(main)
