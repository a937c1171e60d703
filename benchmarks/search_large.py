"""Large-space benchmark: the gradient search against random search, simulated
annealing and the cut DP at equal wall time (``search_benchmark --large``).

Each job runs in fresh processes. Warm: one process per job compiles every
method once (a first gradient search and a short call of each baseline), then
for every seed the gradient search (``search.optimize`` with its defaults) is
timed and its warm wall time is every other method's budget (random search and
annealing per family, the budget split evenly over the job's families; the cut
DP over all of them); the warm-up also builds random search's and
annealing's stage tables, which their warm runs then use. Cold: one fresh
process per method and seed, the budget the gradient search's cold time
(compilation included) of the same seed; the baselines' own set-up and
compilation count against them (with budgets this short they score without
tables, :data:`~search._src.baseline_run.TABLES_BUDGET_S`).

Bounds: one more fresh process per job proves how far the plans can be from
the best of the job's space. Every family gets :func:`search.lower_bound`;
a family of at most :data:`ENUMERABLE` valid plans is also enumerated
(:func:`search.enumerate_plans`). The least of the enumerated optima and the
bounds is a step time no plan of the job beats; where it is an enumerated
optimum, that plan is the job's proven best.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np


def _compared() -> tuple[str, ...]:
  """The registered methods compared with the gradient search at equal wall
  time: every one that returns plans but enumeration (the bounds phase's)."""
  import search  # pylint: disable=g-import-not-at-top
  return tuple(m for m in search.METHODS
               if m not in ("optimize", "enumerate") and search.method(m).plans)


METHODS = ("gradient", *_compared())
# Families of at most this many valid plans are enumerated in the bounds phase
# (DeepSeek-V3's colocated family on 16,384 H800: 1.52e8 plans, 29.7 s).
ENUMERABLE = 3e8
JOBS = ("ppo-70b-1024", "qwen3-235b-512", "dsv3-16384-h800")


def job(name: str, headline):
  """The large jobs: (RLJob, Cluster); ``headline(name)``: the headline jobs of
  ``search_benchmark`` (the PPO 70B job, DeepSeek-V3's batch)."""
  import costmodel as cm  # pylint: disable=g-import-not-at-top
  if name == "ppo-70b-1024":
    return headline(name)
  if name == "qwen3-235b-512":
    j = cm.RLJob("grpo", cm.models.get("qwen3-235b-a22b"), prompts_per_step=512.0,
                 samples_per_prompt=16.0, prompt_len=1024.0,
                 response=cm.ResponseLength.from_mean_max(4000.0, 16384.0))
    return j, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=64)
  if name == "dsv3-16384-h800":
    j, _ = headline("dsv3-16384")
    return j, cm.Cluster(cm.hardware.get("H800"), gpus_per_node=8, nodes=2048)
  raise ValueError(f"job={name!r} is not one of {JOBS}")


def _best(res) -> float:
  return float(res.best_step_time_s) if res.feasible else float("inf")


def _baseline(method: str, j, cluster, fams, budget_s: float, seed: int,
              tables: bool | None = None) -> float:
  """The best step time of ``method`` in ``budget_s`` over the families (in
  turn); ``tables`` to the methods that take it."""
  import inspect  # pylint: disable=g-import-not-at-top

  import search  # pylint: disable=g-import-not-at-top
  takes = "tables" in inspect.signature(search.METHODS[method]).parameters
  m = search.method(method, **({"tables": tables} if takes and tables is not None else {}))
  # Compiled anew, as the gradient search's cold runs are (no persistent cache).
  return _best(search.run(m, j, cluster, families=fams, budget_s=budget_s, seed=seed,
                          compilation_cache=False))


def warm_child(name: str, seeds: int, headline) -> dict:
  """One job, warm: every method compiled first, then ``seeds`` seeds."""
  import search  # pylint: disable=g-import-not-at-top
  from search._src import frameworks  # pylint: disable=g-import-not-at-top
  j, cluster = job(name, headline)
  fams = frameworks.families_for(j, "any")
  sizes = {f: search.space_size(j, cluster, f) for f in fams}
  print(f"{name}: space sizes " + ", ".join(f"{f} {s:.3e}" for f, s in sizes.items()),
        file=sys.stderr, flush=True)
  search.optimize(j, cluster, seed=0)
  for m in METHODS[1:]:  # compiled, and random search's and annealing's tables built
    _baseline(m, j, cluster, fams, 1e-3, 0, tables=True)
  rows = []
  for seed in range(seeds):
    t0 = time.perf_counter()
    res = search.optimize(j, cluster, seed=seed)
    budget = time.perf_counter() - t0
    row = {"seed": seed, "budget_s": budget, "gradient": _best(res)}
    for m in METHODS[1:]:
      row[m] = _baseline(m, j, cluster, fams, budget, seed)
    rows.append(row)
    print(f"{name} warm {json.dumps(row)}", file=sys.stderr, flush=True)
  return {"name": name, "sizes": sizes, "families": fams, "rows": rows,
          "load": os.getloadavg()[0]}


def cold_child(name: str, method: str, seed: int, budget_s: float, headline) -> dict:
  """One cold run in a fresh process (compilation and set-up included)."""
  t0 = time.perf_counter()
  import search  # pylint: disable=g-import-not-at-top
  from search._src import frameworks  # pylint: disable=g-import-not-at-top
  j, cluster = job(name, headline)
  if method == "gradient":
    res = search.optimize(j, cluster, seed=seed, compilation_cache=False)
    return {"best": _best(res), "wall_s": time.perf_counter() - t0,
            "compile_s": res.compile_time_s}
  fams = frameworks.families_for(j, "any")
  left = budget_s - (time.perf_counter() - t0)
  best = _baseline(method, j, cluster, fams, max(left, 1e-3), seed)
  return {"best": best, "wall_s": time.perf_counter() - t0}


def bounds_child(name: str, headline) -> dict:
  """One job's family bounds and, where enumerable, exhaustive optima."""
  import search  # pylint: disable=g-import-not-at-top
  from search._src import frameworks  # pylint: disable=g-import-not-at-top
  j, cluster = job(name, headline)
  out = {"name": name, "families": {}}
  for f in frameworks.families_for(j, "any"):
    b = search.lower_bound(j, cluster, f)
    row = {"bound": b.bound_s, "bound_s": b.wall_time_s, "fits": list(b.fits_pools),
           "size": search.space_size(j, cluster, f)}
    if row["size"] <= ENUMERABLE:
      t0 = time.perf_counter()
      row["optimum"] = search.enumerate_plans(j, cluster, f).best_step_time_s
      row["enumerate_s"] = time.perf_counter() - t0
    out["families"][f] = row
    print(f"{name} bound {f} {json.dumps(row)}", file=sys.stderr, flush=True)
  return out


def _child(args: list[str]) -> dict:
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, "-m", "benchmarks.search_benchmark", *args],
                       capture_output=True, text=True, env=env, check=False)
  if out.returncode:
    raise RuntimeError(out.stderr[-3000:])
  sys.stderr.write("".join(line + "\n" for line in out.stderr.splitlines()
                           if "warm {" in line or "space sizes" in line
                           or " bound " in line))
  return json.loads(out.stdout.strip().splitlines()[-1])


def run(seeds: int, cold_seeds: int, jobs=JOBS, bounds: bool = True) -> dict:
  """Runs the benchmark (each job, cold run and job's bounds in its own process)."""
  warm, cold = [], []
  proven = [_child([f"--large_job={name}", "--large_method=bound"])
            for name in (jobs if bounds else ())]
  for name in jobs if seeds > 0 else ():
    warm.append(_child([f"--large_job={name}", f"--large_seeds={seeds}"]))
    print(json.dumps(warm[-1]), flush=True)
  for name in jobs:
    for seed in range(cold_seeds):
      g = _child([f"--large_job={name}", "--large_method=gradient", f"--large_seed={seed}"])
      row = {"name": name, "seed": seed, "budget_s": g["wall_s"], "compile_s": g["compile_s"],
             "gradient": g["best"]}
      for m in METHODS[1:]:
        out = _child([f"--large_job={name}", f"--large_method={m}", f"--large_seed={seed}",
                      f"--large_budget={g['wall_s']}"])
        row[m], row[f"{m}_wall_s"] = out["best"], out["wall_s"]
      cold.append(row)
      print(json.dumps(row), flush=True)
  return {"warm": warm, "cold": cold, "bounds": proven}


def floor_s(bounds: dict) -> tuple[float, bool]:
  """A job's floor: the least over its families of the enumerated optimum (or,
  where the family was not enumerated, its bound), and whether that is an
  enumerated optimum (a plan that reaches it is the best of the job's space)."""
  best, exact = np.inf, False
  for row in bounds["families"].values():
    v, is_opt = (row["optimum"], True) if "optimum" in row else (row["bound"], False)
    if v < best - 1e-9 or (is_opt and abs(v - best) <= 1e-9):
      best, exact = v, is_opt
  return best, exact


def floors(data: dict) -> list[dict]:
  """Per job of ``data["bounds"]``: its floor (:func:`floor_s`), whether that is
  an enumerated optimum, its warm and cold ``pairs``, the gradient search's
  worst gap above the floor over them (None without pairs), and per baseline
  the pairs whose plan is the proven optimum (no method can be strictly
  better there)."""
  rows = [dict(r, name=w["name"]) for w in data["warm"] for r in w["rows"]] + data["cold"]
  out = []
  for b in data["bounds"]:
    floor, exact = floor_s(b)
    mine = [r for r in rows if r["name"] == b["name"]]
    above = max(r["gradient"] for r in mine) / floor - 1 if mine else None
    stuck = {m: sum(exact and r[m] <= floor * (1 + 1e-6) for r in mine) for m in METHODS[1:]}
    out.append({"name": b["name"], "floor": floor, "exact": exact, "pairs": len(mine),
                "gradient_above": above, "at_optimum": stuck})
  return out


def _bounds_report(data: dict) -> list[str]:
  out = ["", "Proven floors (`search.lower_bound` on every family; `search.enumerate_plans` "
         f"on families of at most {ENUMERABLE:.0e} plans):", "",
         "| job | family | valid plans | bound (s) [s to prove] | exhaustive optimum (s) "
         "[s] |", "|---|---|---:|---:|---:|"]
  for b in data["bounds"]:
    for f, r in b["families"].items():
      opt = (f"{r['optimum']:.2f} [{r['enumerate_s']:.0f}]" if "optimum" in r else "-")
      out.append(f"| {b['name']} | {f} | {r['size']:.2e} | {r['bound']:.2f} "
                 f"[{r['bound_s']:.0f}] | {opt} |")
  out += ["", "| job | floor of the job's space (s) | the floor is | gradient search's plan "
          "above the floor (worst pair) | pairs where the alternative's plan is the proven "
          "optimum (no method can be strictly better): random / annealing / cut DP |",
          "|---|---:|---|---:|---:|"]
  for f in floors(data):
    above = "-" if f["gradient_above"] is None else f"{100 * f['gradient_above']:+.2f}%"
    stuck = " / ".join(f"{f['at_optimum'][m]}/{f['pairs']}" for m in METHODS[1:])
    out.append(f"| {f['name']} | {f['floor']:.2f} | "
               f"{'an optimum (a plan)' if f['exact'] else 'a bound'} | {above} | {stuck} |")
  return out


def comparison(rows: list[dict]) -> dict[str, dict]:
  """Per method over the seed-job pairs ``rows``: ``wins``, the pairs where it
  finds the best plan (ties count for each); for each baseline also
  ``strict`` and ``at_least``, the pairs where the gradient search is strictly
  better / at least as good, and ``median_gap`` and ``least_gap`` (the one
  most in the baseline's favour) of the gap, the baseline's step time / the
  gradient search's - 1."""
  out = {m: {"wins": 0} for m in METHODS}
  for m in METHODS[1:]:
    out[m].update(strict=0, at_least=0)
  gaps = {m: [] for m in METHODS[1:]}
  for r in rows:
    best = min(r[m] for m in METHODS)
    for m in METHODS:
      out[m]["wins"] += int(r[m] <= best * (1 + 1e-6))
    for m in METHODS[1:]:
      out[m]["at_least"] += int(r["gradient"] <= r[m] * (1 + 1e-6))
      out[m]["strict"] += int(r["gradient"] < r[m] * (1 - 1e-6))
      gaps[m].append(r[m] / r["gradient"] - 1 if np.isfinite(r["gradient"]) else np.nan)
  for m in METHODS[1:]:
    out[m]["median_gap"] = float(np.nanmedian(gaps[m]))
    out[m]["least_gap"] = float(np.nanmin(gaps[m]))
  return out


def _summary(rows: list[dict]) -> list[str]:
  n = len(rows)
  out = ["| method | pairs where it finds the best plan (ties count for each) | gradient "
         "search strictly better / at least as good (share of pairs) | median gap to the "
         "gradient search | most in its favour |", "|---|---:|---:|---:|---:|"]
  for m, c in comparison(rows).items():
    if m == "gradient":
      out.append(f"| gradient search | {c['wins']}/{n} | - | - | - |")
    else:
      out.append(f"| {m} | {c['wins']}/{n} | {c['strict'] / n:.0%} / {c['at_least'] / n:.0%} "
                 f"| {100 * c['median_gap']:+.2f}% | {100 * c['least_gap']:+.2f}% |")
  return out


def report(data: dict, date: str) -> str:
  """The markdown section of the large-space benchmark."""
  warm, cold = data["warm"], data["cold"]
  lines = [f"## {date}: large spaces, gradient search vs baselines at equal wall time", ""]
  if warm:
    lines += ["| job | families | valid plans (sum over families) | seeds warm | median warm "
              "budget (s) | load avg |", "|---|---|---:|---:|---:|---:|"]
  for w in warm:
    b = np.median([r["budget_s"] for r in w["rows"]])
    lines.append(f"| {w['name']} | {', '.join(w['families'])} | {sum(w['sizes'].values()):.2e} "
                 f"| {len(w['rows'])} | {b:.1f} | {w['load']:.1f} |")
  rows = [dict(r, name=w["name"]) for w in warm for r in w["rows"]]
  lines += ["", "Gap = step time found / the gradient search's - 1 (positive: the "
            "alternative is slower)."]
  if rows:
    lines += ["", f"Warm ({len(rows)} seed-job pairs):", ""] + _summary(rows)
  if cold:
    lines += ["", f"Cold ({len(cold)} seed-job pairs, budget = the gradient search's cold wall "
              "time incl. compilation):", ""] + _summary(cold)
  if data.get("bounds"):
    lines += _bounds_report(data)
  lines += ["", "| job | seed | mode | budget (s) | gradient (s) | random (s) | annealing (s) "
            "| cut DP (s) |", "|---|---:|---|---:|---:|---:|---:|---:|"]
  for mode, rs in (("warm", rows), ("cold", cold)):
    for r in rs:
      lines.append(f"| {r['name']} | {r['seed']} | {mode} | {r['budget_s']:.1f} | "
                   + " | ".join(f"{r[m]:.2f}" for m in METHODS) + " |")
  return "\n".join(lines) + "\n"
