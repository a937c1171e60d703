"""The layout search: relax, optimise with optax, round, refine, rank.

:func:`optimize` runs the gradient search method
(:mod:`search._src.methods.gradient`) with :func:`search.run`. For each
placement family (enumerated, see :mod:`search._src.space`):

1. ``starts`` random starts are optimised together on the relaxed model
   (:mod:`search._src.relax`: one jitted Adam step called once per step, starts
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

import dataclasses
import time

import numpy as np

import costmodel as cm
from search._src import frameworks as fw_lib
from search._src import relax
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import speculative_option
from search._src.methods import gradient
from search._src.methods import run as run_lib
from search._src.result import SearchResult


def _check_int(name: str, value, low: int) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
    raise ValueError(f"optimize: {name}={value!r} must be an integer >= {low}")


def optimize(job: cm.RLJob, cluster: cm.Cluster, families=None, starts: int = 16,
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
  fw_lib.get(framework)
  try:
    fams = run_lib.check_families(job, framework, families, max_staleness, partial_rollout)
  except ValueError as e:
    raise ValueError(f"optimize: {e}") from None
  speculative_option.check(framework, job, speculative)
  if rollout_precision is not None:
    space = dataclasses.replace(space or space_lib.SpaceOptions(),
                                rollout_precision=tuple(rollout_precision))
  method = gradient.gradient(starts=starts, steps=steps, relax_config=relax_config,
                             dp_seeds=dp_seeds, relaxed=relaxed)
  res = run_lib.run(method, job, cluster, families=fams, framework=framework, seed=seed,
                    top_k=top_k, space=space, efficiency=efficiency,
                    max_staleness=max_staleness, partial_rollout=partial_rollout,
                    progress=progress, compilation_cache=compilation_cache)
  wall = res.wall_time_s
  t0 = time.perf_counter()
  res = speculative_option.apply(res, job, cluster, speculative, efficiency)
  return dataclasses.replace(res, wall_time_s=wall + time.perf_counter() - t0)


# The gradient search's settings, as the command line and benchmarks name them.
DEFAULT_STARTS = gradient.DEFAULT_STARTS
RELAXED = gradient.RELAXED
RELAX_MIN_PLANS = gradient.RELAX_MIN_PLANS
relaxes = gradient.relaxes
