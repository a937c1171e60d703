"""The layout search: relax, optimise with optax, round, refine, rank.

For each placement family (enumerated, see :mod:`search._src.space`):

1. ``starts`` random starts are optimised together on the relaxed model
   (:mod:`search._src.relax`: one jitted ``lax.scan`` over Adam steps, starts
   batched by ``vmap`` and sharded over the devices) when the space is large
   (``relaxed``, :func:`relaxes`); on smaller spaces the discrete phases alone
   find the same plans and the starts are rounded as drawn;
2. every relaxed solution is rounded to its neighbouring valid discrete plans,
   which are scored exactly in one batch (:mod:`search._src.rounding`), next
   to the cut DP's candidates on the family's coarsest pool sizes
   (:func:`~search._src.cut_dp.family_seeds`; ``dp_seeds``);
3. the best of them seed a batched discrete local search on the exact model;
4. from the best plan, the best of another pool split and the DP's two best
   splits, the pool sizes, each role's layout and the engines' are swept whole
   (every valid combination of that block, the rest held;
   :func:`~search._src.block_sweep.block_sweep`), and an improved plan is
   refined by the local search again.

The families of a job share one relaxed loop and one exact program
(:mod:`search._src.shared`: one value vector over the union of their
variables, the row's family a column, each stage costed once), so a cold
search compiles two programs whatever the number of families; the exact
program compiles in a thread of its own while the relaxed loop runs, and the
relaxed starts run in one thread per core. A single family (or a sizing
space) has programs of its own.

The families' plans are then ranked together; the best ``top_k`` feasible
plans that differ in placement or a parallel degree (not only in a tuning
knob, :func:`~search._src.result.layout_key`) are returned with their exact
estimates, next to each family's relaxed optimum. The space is the chosen
framework's (:mod:`search._src.frameworks`); with a framework named, only
plans its exporter accepts are returned. Off-policy families are searched
only when the user allows them (``max_staleness``, ``partial_rollout``);
then the best on-policy plan is reported too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import sys
import threading
import time

from absl import flags
from absl import logging
import numpy as np

import costmodel as cm
from search._src import compile_cache
from search._src import family_search
from search._src import frameworks as fw_lib
from search._src import progress as progress_lib
from search._src import relax
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import speculative_option
from search._src.result import SearchResult


def _progress(message: str) -> None:
  """absl INFO once absl's flags are parsed (a command line: shown with
  ``--verbose``), else a line on stderr."""
  if flags.FLAGS.is_parsed():
    logging.info(message)
  else:
    print(message, file=sys.stderr, flush=True)


def _check_int(name: str, value, low: int) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
    raise ValueError(f"optimize: {name}={value!r} must be an integer >= {low}")


# Relaxed starts per family. On the 24 enumerable problems of
# ``benchmarks.search_steps`` 16 starts find the exhaustive optimum as 32 and 64
# do (gap 0.00% on all 24, benchmarks/results/search_steps.md), and a quarter
# of 64 starts cuts the default job's warm search by more than half and its cold
# one by about a third.
DEFAULT_STARTS = 16


def optimize(job: cm.RLJob, cluster: cm.Cluster, families=None, starts: int = DEFAULT_STARTS,
             steps: int = 100, seed: int = 0, top_k: int = 5,
             efficiency: cm.Efficiency | None = None, progress: bool = False,
             space: space_lib.SpaceOptions | None = None,
             relax_config: relax.RelaxConfig | None = None, framework: str = "any",
             max_staleness: int = 0, partial_rollout: bool = False,
             compilation_cache: str | bool | None = None,
             rollout_precision: tuple[str, ...] | None = None,
             dp_seeds: bool = True, relaxed: str = "auto",
             speculative: cm.Speculative | None = None) -> SearchResult:
  """Searches the layout of ``job`` on ``cluster`` that minimises step time.

  Args:
    job: The RL job.
    cluster: The cluster.
    families: Placement families to search (default: every family that
      applies to the job, that ``framework`` runs and whose mode the user
      allows; :func:`search.default_families` lists those that apply in any
      mode).
    starts: Random starts per family, optimised together.
    steps: Relaxed optimisation steps.
    seed: Random seed; the same seed gives the same plan.
    top_k: Plans to return.
    efficiency: Efficiency parameters of the cost model (defaults if None).
    progress: A progress bar on stderr when it is a terminal, and one line
      per family: absl logging (INFO) once flags are parsed, else stderr.
    space: The discrete options of each variable (defaults if None).
    relax_config: Schedules of the relaxed phase (``steps`` overrides its
      step count).
    framework: ``any`` or a framework (``verl``, ``openrlhf``, ``nemo_rl``,
      ``slime``, ``areal``): the space holds only plans it can run, and the
      plans returned are those its exporter accepts.
    max_staleness: Largest staleness allowed (0: on-policy, synchronous).
    partial_rollout: Whether partial rollouts may be used (needs
      ``max_staleness >= 1``).
    compilation_cache: Directory of the persistent JAX compilation cache;
      None: ``$RLCOST_JAX_CACHE`` or ``~/.cache/rlcost/jax``; False: off.
    rollout_precision: Rollout engine formats the user allows (``("bf16",
      "fp8")``; None: the space's, BF16 only by default). FP8 is searched
      only on an accelerator with an FP8 peak and a framework that writes it,
      each format as a space of its own (its families' results labelled
      ``family+fp8``).
    relaxed: The relaxed (gradient) phase: ``on``, ``off`` (the discrete
      phases start from the random starts as drawn and the cut DP's
      candidates), or ``auto``: on when some family's space holds at least
      :data:`RELAX_MIN_PLANS` value vectors (before validity checks) or
      ``dp_seeds`` is off. On the 24 enumerable
      benchmark problems and the default job (at most 1.3e10) the search
      without it finds the same plans, 3-4 s sooner from a cold start; on
      Qwen3-235B on 512 GPUs (4.0e12) it finds a plan 1.4% faster than
      without it in 4 seeds of 4 (PPO 70B, DeepSeek-V3: the same plans).
    dp_seeds: Start the discrete phase from the cut DP's candidates too
      (:func:`search.cut_dp` on each family's coarsest pool sizes, sharing the
      search's evaluator) besides the rounded relaxed solutions. On the large
      benchmark spaces the relaxed starts alone stopped 0-3% above the cut DP's
      plan (a different pool split); with its seeds the search is never worse
      than the cut DP's coarse level and the sweeps refine its plan.
    speculative: A draft (:class:`costmodel.Speculative`) the rollout engines
      may run: each returned plan keeps it only where it shortens the step
      (:mod:`search._src.speculative_option`); only with a framework that
      passes a speculative configuration to its engine.

  Returns:
    A :class:`SearchResult`. When no plan fits, ``best_plan`` is None and
    ``infeasible_reason`` names the stage of the least-bad plan that does not
    fit and by how much (or the exporter's refusal).

  Raises:
    ValueError: for an unknown family or framework, a family outside the
      allowed modes or the framework, or non-positive ``starts``, ``steps``
      or ``top_k``, a negative ``max_staleness``, ``relaxed`` not one of
      ``auto``, ``on``, ``off``.

  Notes:
    Compilation dominates a cold search (one relaxed loop and one exact
    program for all families, :mod:`search._src.shared`); jobs that differ
    only in numbers (lengths, batch sizes, hardware figures) reuse the
    compiled code, and the persistent cache serves it (and the traced
    programs) to later processes. ``compile_time_s`` of
    the result says how much of the wall time was tracing and compilation.

  Example:
    >>> import costmodel as cm, search
    >>> job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"))
    >>> res = search.optimize(job, cm.Cluster("H100", 8, 1), starts=8, steps=50)
    >>> res.best_estimate.step_time_s  # doctest: +SKIP
  """
  t0 = time.perf_counter()
  result_lib.check_arguments("optimize", job, cluster)
  _check_int("starts", starts, 1)
  _check_int("steps", steps, 1)
  _check_int("top_k", top_k, 1)
  _check_int("seed", seed, 0)
  _check_int("max_staleness", max_staleness, 0)
  if relaxed not in RELAXED:
    raise ValueError(f"optimize: relaxed={relaxed!r} must be one of {RELAXED}")
  if partial_rollout and max_staleness < 1:
    raise ValueError(f"optimize: partial_rollout=True needs max_staleness >= 1, got "
                     f"{max_staleness=}")
  fw = fw_lib.get(framework)
  allowed = fw_lib.families_for(job, framework, max_staleness, partial_rollout)
  fams = tuple(families) if families is not None else allowed
  for f in fams:
    if f not in space_lib.FAMILIES:
      raise ValueError(f"optimize: family={f!r} is not one of {space_lib.FAMILIES}")
    if f not in allowed and cm.placement(f).applies_to(job):
      raise ValueError(f"optimize: family={f!r} is outside the space of {framework=} with "
                       f"{max_staleness=}, {partial_rollout=} (allowed: {allowed})")
  if not fams:
    raise ValueError("optimize: families is empty")
  speculative_option.check(framework, job, speculative)
  if rollout_precision is not None:
    space = dataclasses.replace(space or space_lib.SpaceOptions(),
                                rollout_precision=tuple(rollout_precision))
  compile_cache.enable(compilation_cache)
  with compile_cache.CompileClock() as clock:
    res = _search(job, cluster, fams, fw, starts, seed, top_k,
                  efficiency if efficiency is not None else cm.Efficiency(),
                  (relax_config or relax.RelaxConfig())._replace(steps=int(steps)), space,
                  progress, bool(dp_seeds), relaxed)
  res = speculative_option.apply(res, job, cluster, speculative, efficiency)
  wall = time.perf_counter() - t0
  res = dataclasses.replace(res, wall_time_s=wall, compile_time_s=min(clock.seconds, wall))
  if res.on_policy is not None:
    res = dataclasses.replace(res, on_policy=dataclasses.replace(
        res.on_policy, wall_time_s=wall, compile_time_s=res.compile_time_s))
  return res


RELAXED = ("auto", "on", "off")

# ``relaxed="auto"`` runs the relaxed phase from this many value vectors in a
# family's space (``FamilySpace.size``, before validity checks): between the
# largest space where the discrete phases alone found every plan it found (the
# default job's split family, 1.3e10) and the smallest where it found a better
# one (Qwen3-235B's split family on 512 GPUs, 4.0e12).
RELAX_MIN_PLANS = 1e11


def relaxes(relaxed: str, spaces, dp_seeds: bool = True) -> bool:
  """Whether a search with ``relaxed`` (``auto``, ``on``, ``off``) over the
  family ``spaces`` runs its relaxed phase: ``auto`` when a space holds at least
  :data:`RELAX_MIN_PLANS` value vectors or without the cut DP's seeds (then the
  relaxed solutions are the only informed starts)."""
  if relaxed == "auto":
    return not dp_seeds or any(float(fs.size) >= RELAX_MIN_PLANS for fs in spaces)
  return relaxed == "on"


def _label(family: str, rollout_precision: str) -> str:
  """A family's name in the results, with its rollout format beyond BF16."""
  return family if rollout_precision == "bf16" else f"{family}+{rollout_precision}"


def _search(job, cluster, fams, fw: fw_lib.Framework, starts, seed, top_k, eff, cfg, space,
            progress, dp_seeds: bool = True, relaxed: str = "auto") -> SearchResult:
  # A family that holds no plan of the job on this cluster is skipped, saying why.
  skipped = {fam: fw.why_empty(fam, job, cluster, space) for fam in fams}
  skipped = {fam: why for fam, why in skipped.items() if why is not None}
  spaces = [(_label(fam, prec), fw.build(fam, job, cluster, space, prec)) for fam in fams
            if fam not in skipped for prec in fw.rollout_precisions(space, cluster)]
  relaxed = relaxes(relaxed, [fs for _, fs in spaces], dp_seeds)
  bar = progress_lib.Bar(len(spaces), enabled=progress)

  traced = [threading.Event() for _ in spaces]

  def one(k):
    fam, fs = spaces[k]
    tf = time.perf_counter()
    # The exact evaluators wait for the relaxed loops of the families that start
    # at once (one per thread) to be traced: the relaxed loops compile longest.
    # A family that waits for a thread of its own is not waited for.
    try:
      run, out = family_search.search_family(
          fs, eff, starts, seed, cfg, on_phase=bar.phase, dp_seeds=dp_seeds, traced=traced[k],
          warm_after=tuple(traced[:family_search.workers(len(spaces))]) if relaxed else (),
          relaxed=relaxed)
    finally:
      traced[k].set()  # also when the family failed before its relaxed loop
    return run, out, time.perf_counter() - tf

  # Families that can share one relaxed loop and exact program do (one
  # compilation of each for the job); otherwise each family runs in a thread:
  # JAX releases the interpreter lock while XLA compiles and runs, so the
  # families' programs compile on separate cores. Each family has its own
  # random generator: the result does not depend on the order in which they finish.
  with bar:
    if family_search.shareable([fs for _, fs in spaces]):
      outs = family_search.search_shared([fs for _, fs in spaces], eff, starts, seed, cfg,
                                         on_phase=bar.phase, dp_seeds=dp_seeds,
                                         relaxed=relaxed)
    else:
      with concurrent.futures.ThreadPoolExecutor(family_search.workers(len(spaces))) as pool:
        outs = list(pool.map(one, range(len(spaces))))
  runs, history, bound, best_by = [], {}, {}, {}
  for (fam, _), (run, out, seconds) in zip(spaces, outs, strict=True):
    if not len(run.ranked.feasible):  # no rounded, seeded or swept row is a valid plan
      skipped[fam] = (f"{fam}: no valid plan found (every candidate breaks a rule of "
                      f"{fw.name}'s space)")
      continue
    runs.append(run)
    history[fam] = out.history_s
    bound[fam] = family_search.relaxed_best(out, cfg)
    r = run.ranked
    best_by[fam] = float(r.step_time_s[0]) if len(r.feasible) and r.feasible[0] else np.inf
    if progress:
      relaxed_s = f"{bound[fam]:8.2f} s" if np.isfinite(bound[fam]) else f"{'-':>10}"
      _progress(f"family {fam:<20} relaxed {relaxed_s}  rounded {best_by[fam]:8.2f} s"
                f"  {run.ev.count:7d} evaluations  {seconds:.1f} s")
  done = dict(method="optimize", relaxed_bound_s=bound, best_by_family_s=best_by,
              history=history, framework=fw.name, relaxed=relaxed, skipped=skipped,
              evaluations=sum(r.ev.count for r in runs))
  if not runs:
    return SearchResult(infeasible_reason="no family holds a plan: " + "; ".join(
        skipped.values()), **done)
  # Rank every family's plans together.
  owner = [(k, i) for k, run in enumerate(runs) for i in range(len(run.ranked.feasible))]
  cat = lambda field: np.concatenate([getattr(r.ranked, field) for r in runs], 0)
  order = result_lib.ranking(cat("step_time_s"), cat("feasible"), cat("excess"))
  entries = [owner[j] for j in order]
  feasible = [(k, i) for k, i in entries if runs[k].ranked.feasible[i]]
  if not feasible:
    k, i = entries[0]
    run = runs[k]
    est = run.ev.estimates(run.ranked.values[i:i + 1])[0]
    reason = (f"no feasible plan in families {', '.join(r.fs.family for r in runs)}; the "
              f"least-bad ({run.fs.family}): " + result_lib.least_bad_reason(est))
    return SearchResult(infeasible_reason=reason, **done)
  chosen, refusal = _distinct(runs, feasible, top_k, fw, job, cluster)
  if not chosen:
    return SearchResult(infeasible_reason=f"no plan found that {fw.name} runs; its exporter "
                        f"refused the best: {refusal}", **done)
  on_policy = None
  if any(not fw_lib.on_policy(r.fs.family) for r in runs):
    sync = [(k, i) for k, i in feasible if fw_lib.on_policy(runs[k].fs.family)]
    first, _ = _distinct(runs, sync, 1, fw, job, cluster)
    if first:
      ((plan, est),), fam = _exact(runs, first), runs[first[0][0]].fs.family
      on_policy = SearchResult(method="optimize", best_plan=plan, best_estimate=est,
                               family=fam, top=((plan, est),), top_families=(fam,),
                               framework=fw.name, relaxed=relaxed,
                               accepted_by=fw_lib.accepting(plan, job, cluster))
  # The plans are already as the framework runs them (``Structure.runs_as``), so the
  # ranking's exact estimates are theirs and its order stands.
  plans, top_fams = tuple(_exact(runs, chosen)), tuple(runs[k].fs.family for k, _ in chosen)
  return SearchResult(best_plan=plans[0][0], best_estimate=plans[0][1], family=top_fams[0],
                      top=plans, top_families=top_fams, on_policy=on_policy,
                      accepted_by=fw_lib.accepting(plans[0][0], job, cluster), **done)


# Ranked plans looked at for distinct, exportable top plans (each family keeps
# as many, :data:`~search._src.result.KEEP`).
_MAX_SCAN = result_lib.KEEP


def _distinct(runs, entries, top_k, fw, job, cluster):
  """The first ``top_k`` entries with distinct layouts
  (:func:`~search._src.result.layout_key`) that ``fw`` runs, and the first
  refusal met (None when none)."""
  chosen, seen, refusal = [], set(), None
  # A row whose layout columns equal those of a row whose key is taken has that
  # key: skipped without building its plan (the ranked plans near the top mostly
  # differ in tuning knobs).
  columns = [result_lib.layout_columns(r.fs.names) for r in runs]
  taken = set()
  for k, i in entries[:_MAX_SCAN]:
    fs = runs[k].fs
    row = np.asarray(runs[k].ranked.values[i], np.float64)
    raw = (k, row[columns[k]].tobytes())
    if raw in taken:
      continue
    plan = fs.to_plan(row)
    key = result_lib.layout_key(plan, fs.family)
    if key in seen:
      taken.add(raw)
      continue
    err = fw_lib.export_error(fw.name, plan, job, cluster)
    if err is not None:
      refusal = refusal or err
      continue
    seen.add(key)
    taken.add(raw)
    chosen.append((k, i))
    if len(chosen) == top_k:
      break
  return chosen, refusal


def _exact(runs, chosen):
  """(plan, exact estimate) of each chosen entry, in order. Each family's
  entries are estimated in a thread of their own, so that the families' own
  whole-estimate programs (``SharedSpace.whole`` off) compile side by side."""
  fams = sorted({k for k, _ in chosen})
  rows = {k: [i for kk, i in chosen if kk == k] for k in fams}

  def one(k):
    return zip(rows[k], result_lib.exact_plans(runs[k].ev, runs[k].ranked.values[rows[k]]),
               strict=True)

  with concurrent.futures.ThreadPoolExecutor(family_search.workers(len(fams))) as pool:
    out = {(k, i): pe for k, pairs in zip(fams, pool.map(one, fams), strict=True)
           for i, pe in pairs}
  return [out[c] for c in chosen]
