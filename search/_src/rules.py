"""Rules of thumb for RL layouts, as plans the cost model can score.

Each rule fixes the placement and the GPU split the way practitioners do, then
picks the smallest layout degrees that fit in memory: FSDP/ZeRO-3 without
model parallelism first, then with offload, then Megatron-style TP x PP
growing from 2 GPUs; at each level the largest micro-batch (8 down to 1) that
fits. The engine's tensor parallelism starts at the rule's value and doubles
(then pipelines) until the weights and one sequence's KV cache fit.

* ``verl``: veRL's hybrid engine: every role and the engines on all GPUs, FSDP
  (ZeRO-3) with gradient checkpointing, rollout
  ``tensor_model_parallel_size = 2`` and ``gpu_memory_utilization = 0.5``
  and ``max_num_seqs = 256`` (``export.ENGINE_DEFAULTS``, from veRL's trainer
  config at the exporter's pin).
* ``openrlhf``: OpenRLHF's disaggregated layout with equal GPUs per group:
  vLLM : actor (+ reference) : critic (+ reward) = 1:1:1 for PPO, vLLM :
  training = 1:1 without a critic; DeepSpeed ZeRO-3 with gradient
  checkpointing (its example scripts), ``vllm_tensor_parallel_size = 1`` and
  ``vllm_gpu_memory_utilization = 0.95`` (``export.ENGINE_DEFAULTS``, from
  ``openrlhf/cli/train_ppo_ray.py`` at the exporter's pin).
* ``areal``: AReaL's asynchronous recipe with 3/4 of the GPUs generating
  (allocation ``sglang.d48 + d16`` style), staleness 1 and interruptible
  (partial) rollouts, its engines at ``export.ENGINE_DEFAULTS["areal"]`` (SGLang's
  ``mem_fraction_static = 0.9`` in AReaL's config at the exporter's pin).
* ``kv_fit``: the fewest GPUs whose engines' KV cache holds the whole batch at
  once generate; the rest train (synchronous).

The rules are scored in the search's space (:func:`rules_of_thumb` takes its
framework): pool shares are rounded to pool sizes the search may use (a
training pool whose data-parallel degree can divide the batch, the rollout
pool the rest), and a rule whose execution mode the user did not allow (the
asynchronous ``areal`` rule when ``max_staleness = 0``) is left out, so each
rule compares with the searched plan in the same mode.
"""

from __future__ import annotations

import time

import numpy as np

import costmodel as cm
import export
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import space as space_lib
from search._src.result import SearchResult

_MICRO_BATCHES = (8, 4, 2, 1)


def _degree_ladder(fs: space_lib.FamilySpace, role: str) -> list[dict]:
  """Layouts of ``role`` from the least to the most model-parallel."""
  tps = [float(t) for t in fs.var(f"{role}.tp").options]
  pps = [float(p) for p in fs.var(f"{role}.pp").options]
  out = [dict(tp=1.0, pp=1.0, zero=3.0, offload=0.0), dict(tp=1.0, pp=1.0, zero=3.0, offload=1.0)]
  for tp in tps[1:]:
    out.append(dict(tp=tp, pp=1.0, zero=1.0, offload=0.0))
  for pp in pps[1:]:
    out.append(dict(tp=tps[-1], pp=pp, zero=1.0, offload=0.0))
  return out


def _engine_ladder(fs: space_lib.FamilySpace, tp0: float) -> list[tuple[float, float]]:
  tps = [float(t) for t in fs.var("engine.tp").options if t >= tp0]
  if not tps:
    tps = [float(fs.var("engine.tp").options[-1])]
  pps = [float(p) for p in fs.var("engine.pp").options]
  return [(t, 1.0) for t in tps] + [(tps[-1], p) for p in pps[1:]]


def _rows(fs: space_lib.FamilySpace, pools: dict, engine_tp: float, memory_fraction: float,
          max_seqs: float) -> list[np.ndarray]:
  """Candidate value vectors of a rule, in the order the rule prefers them."""
  roles = [r for r in ("actor", "critic", "reward") if r in fs.structure.roles]
  base = np.zeros(len(fs.vars))
  for p, g in pools.items():
    base[fs.index(f"pool.{p}")] = g
  for r in roles:
    base[fs.index(f"{r}.cp")] = 1.0
    base[fs.index(f"{r}.ep")] = 1.0
    if r in ("actor", "critic"):
      base[fs.index(f"{r}.recompute")] = 2.0
  if "reference" in fs.structure.roles:
    base[fs.index("reference.offload")] = 0.0
  base[fs.index("engine.ep")] = 0.0
  base[fs.index("engine.memory_fraction")] = memory_fraction
  base[fs.index("engine.max_seqs")] = max_seqs
  ladders = {r: _degree_ladder(fs, r) for r in roles}
  depth = max(len(v) for v in ladders.values())
  out = []
  for (etp, epp) in _engine_ladder(fs, engine_tp):
    for level in range(depth):
      for mb in _MICRO_BATCHES:
        v = base.copy()
        v[fs.index("engine.tp")], v[fs.index("engine.pp")] = etp, epp
        for r in roles:
          d = ladders[r][min(level, len(ladders[r]) - 1)]
          v[fs.index(f"{r}.tp")], v[fs.index(f"{r}.pp")] = d["tp"], d["pp"]
          v[fs.index(f"{r}.zero")], v[fs.index(f"{r}.offload")] = d["zero"], d["offload"]
          if r in ("actor", "critic"):
            v[fs.index(f"{r}.mb_train")] = mb
          v[fs.index(f"{r}.mb_infer")] = mb
        if "reference" in fs.structure.roles:
          v[fs.index("reference.offload")] = v[fs.index("actor.offload")]
        out.append(v)
  return out


def _runs(fs: space_lib.FamilySpace, row: np.ndarray) -> bool:
  try:
    cm.validate_plan(fs.job, fs.to_plan(np.asarray(row, np.float64)), fs.cluster)
  except ValueError:
    return False
  return True


def _running(fs: space_lib.FamilySpace, rows: list[np.ndarray]) -> list[np.ndarray]:
  """The rows whose plan :func:`costmodel.validate_plan` accepts, in order.

  The per-plan rules are read over all rows at once (:meth:`FamilySpace.runs`);
  the first row they pass goes through ``validate_plan`` itself for the rules
  every plan of the family shares, and when it fails there each remaining
  row does.
  """
  if fs is None or not rows:
    return []
  keep = np.flatnonzero(fs.runs(np.stack(rows)))
  if len(keep) and _runs(fs, rows[keep[0]]):
    return [rows[i] for i in keep]
  return [rows[i] for i in keep[1:] if _runs(fs, rows[i])]


def _pick(name: str, description: str, family: str, fs: space_lib.FamilySpace | None, rows,
          eff: cm.Efficiency | None) -> SearchResult:
  """The rule's plan: the first of its candidate rows (in the rule's order of
  preference) that runs and fits, else the least-bad one."""
  t0 = time.perf_counter()
  rows = _running(fs, rows)
  if not rows:
    return SearchResult(method=name, description=description, family=family,
                        infeasible_reason=f"no layout of the rule runs in family {family!r}",
                        wall_time_s=time.perf_counter() - t0)
  ev = evaluate.Evaluator(fs, eff, full=True)
  values = np.stack(rows)
  # A rule has a few dozen candidate rows at most: scored by the whole-estimate
  # program that also gives the chosen plan's estimate, one compiled program per
  # family instead of that and the ranking program (the PPO job's four rules
  # took 53 s from a cold start with both, 22 s with one).
  s, _ = ev.scores(values, with_estimates=True)
  # A rule takes the first layout in its own order that fits, not the fastest:
  # its order of preference stands in for the step time of the ranking.
  i = int(result_lib.ranking(np.arange(len(values), dtype=float), s.feasible, s.excess)[0])
  if not s.feasible[i]:
    est = ev.estimates(values[i:i + 1])[0]
    return SearchResult(method=name, description=description, family=family,
                        evaluations=ev.count, wall_time_s=time.perf_counter() - t0,
                        infeasible_reason=result_lib.least_bad_reason(est))
  top = tuple(result_lib.exact_plans(ev, values[i:i + 1]))
  return SearchResult(method=name, description=description, family=family,
                      best_plan=top[0][0], best_estimate=top[0][1], top=top,
                      top_families=(family,), evaluations=ev.count,
                      wall_time_s=time.perf_counter() - t0,
                      best_by_family_s={family: float(top[0][1].step_time_s)})


def _round_pools(fs: space_lib.FamilySpace, shares: dict) -> dict:
  """Pool shares of the cluster -> pool sizes of the space: each pool other
  than the rollout pool takes the size of its options nearest its share (at
  most its share when one is), the rollout pool the largest of its options
  within the GPUs left."""
  n = fs.cluster.n_gpus
  total = sum(shares.values())
  rollout = fs.rollout_pool
  out, left = {}, float(n)
  others = [p for p in shares if p != rollout]
  for k, p in enumerate(others):
    opts = fs.var(f"pool.{p}").options
    # Leave at least one GPU for each pool still to place.
    opts = opts[opts <= left - (len(others) - k - 1) - (rollout in shares)]
    want = shares[p] / total * n
    below = opts[opts <= want + 1e-9]
    out[p] = float(below[-1] if len(below) else opts[0]) if len(opts) else 1.0
    left -= out[p]
  if rollout in shares:
    opts = fs.var(f"pool.{rollout}").options
    opts = opts[opts <= left]
    out[rollout] = float(opts[-1]) if len(opts) else 1.0
  return out


def _framework(family: str, framework: str) -> fw_lib.Framework:
  """The search's framework, or ``any`` when it does not run ``family``."""
  fw = fw_lib.get(framework)
  return fw if family in fw.families else fw_lib.get("any")


def _family(family: str, job: cm.RLJob, cluster: cm.Cluster, framework: str = "any"):
  """A rule's placement record and its space in the search's framework (in the
  ``any`` space when that framework does not run the family; None when the
  family cannot hold the job)."""
  return cm.placement(family), _framework(family, framework).build(family, job, cluster)


def _not_held(name: str, description: str, family: str, job: cm.RLJob, cluster: cm.Cluster,
              framework: str) -> SearchResult:
  why = _framework(family, framework).why_empty(family, job, cluster)
  return SearchResult(method=name, description=description, family=family,
                      infeasible_reason=why, skipped={family: why})


def _split_rule(name: str, description: str, family: str, job: cm.RLJob, cluster: cm.Cluster,
                framework: str, shares, engine: export.EngineDefaults,
                efficiency: cm.Efficiency | None) -> SearchResult:
  """A rule that splits the cluster into pools by ``shares(placement)`` (shares
  by pool name, rounded to the space's pool sizes) with the engine's TP, memory
  fraction and sequence cap fixed."""
  place, fs = _family(family, job, cluster, framework)
  if fs is None:
    return _not_held(name, description, place.name, job, cluster, framework)
  rows = _rows(fs, _round_pools(fs, shares(place)), engine.tp, engine.memory_fraction,
               engine.max_seqs)
  return _pick(name, description, place.name, fs, rows, efficiency)


def verl_default(job: cm.RLJob, cluster: cm.Cluster,
                 efficiency: cm.Efficiency | None = None,
                 framework: str = "any") -> SearchResult:
  """veRL's default hybrid-engine layout (colocated, FSDP, rollout TP 2, 0.5)."""
  place, fs = _family("colocated", job, cluster, framework)
  if fs is None:
    return _not_held("verl", "colocated, FSDP, rollout TP=2, memory 0.5", place.name, job,
                     cluster, framework)
  e = export.ENGINE_DEFAULTS["verl"]
  rows = _rows(fs, {place.rollout_pool: float(cluster.n_gpus)}, e.tp, e.memory_fraction,
               e.max_seqs)
  return _pick("verl", "colocated, FSDP, rollout TP=2, memory 0.5", place.name, fs, rows,
               efficiency)


def openrlhf_split(job: cm.RLJob, cluster: cm.Cluster,
                   efficiency: cm.Efficiency | None = None,
                   framework: str = "any") -> SearchResult:
  """OpenRLHF's equal split (vLLM : actor : critic = 1:1:1; 1:1 without a critic)."""
  three = cm.placement("split3").applies_to(job)
  desc = (f"vLLM:{'actor:critic = 1:1:1' if three else 'training = 1:1'}, ZeRO-3, "
          "vLLM TP=1, memory 0.95")
  # Equal shares for the rollout pool and each pool of the other roles.
  return _split_rule("openrlhf", desc, "split3" if three else "split", job, cluster,
                     framework, lambda place: dict.fromkeys(place.pools, 1 / len(place.pools)),
                     export.ENGINE_DEFAULTS["openrlhf"], efficiency)


def areal_split(job: cm.RLJob, cluster: cm.Cluster,
                efficiency: cm.Efficiency | None = None,
                framework: str = "any") -> SearchResult:
  """AReaL's asynchronous layout with 3/4 of the GPUs generating."""
  return _split_rule("areal", "3/4 of GPUs generate, asynchronous (staleness 1, partial "
                     "rollouts)", "split_async_partial", job, cluster, framework,
                     lambda place: {place.rollout_pool: 0.75, place.pool_of("actor"): 0.25},
                     export.ENGINE_DEFAULTS["areal"],
                     efficiency)


def kv_fit_split(job: cm.RLJob, cluster: cm.Cluster,
                 efficiency: cm.Efficiency | None = None,
                 framework: str = "any") -> SearchResult:
  """The fewest GPUs whose KV cache holds the batch generate; the rest train."""
  place, fs = _family("split", job, cluster, framework)
  desc = "fewest GPUs whose KV cache holds the batch generate, the rest train"
  if fs is None:
    return _not_held("kv_fit", desc, place.name, job, cluster, framework)
  gen, train = f"pool.{place.rollout_pool}", f"pool.{place.pool_of('actor')}"
  n = cluster.n_gpus
  n_seq = float(job.generated_samples_per_step)
  ev = evaluate.Evaluator(fs, efficiency, full=True)
  rest_opts = fs.var(train).options
  gens = [g for g in fs.var(gen).options if (rest_opts <= n - g).any()]

  def probe(g: float):
    """The rule's row with ``g`` GPUs generating (None if none fits), and
    whether its engines' KV cache holds the batch."""
    # The training pool: the largest size the space allows in what is left;
    # the rollout pool takes every GPU the training pool leaves.
    rest = float(rest_opts[rest_opts <= n - g][-1])
    gen_opts = fs.var(gen).options
    g = float(gen_opts[gen_opts <= n - rest][-1])
    pools = {place.rollout_pool: g, place.pool_of("actor"): rest}
    rows = _running(fs, _rows(fs, pools, 1.0, 0.9, max(n_seq, 1.0)))
    if not rows:
      return None, False
    values = np.stack(rows)
    s, est = ev.scores(values, with_estimates=True)
    ok = np.flatnonzero(s.feasible)
    if not len(ok):
      return None, False
    replicas = g / (values[ok[0], fs.index("engine.tp")] * values[ok[0], fs.index("engine.pp")])
    return values[ok[0]], float(est.gen_concurrency[ok[0]]) * replicas >= n_seq * (1 - 1e-6)

  # The fewest generating GPUs that hold the batch, by bisection over the
  # rollout pool sizes (more GPUs hold more); when none does, the largest
  # pool with a fitting plan.
  chosen, lo, hi, fallback = None, 0, len(gens) - 1, None
  while lo <= hi and gens:
    mid = (lo + hi) // 2
    row, holds = probe(gens[mid])
    if holds:
      chosen, hi = row, mid - 1
    else:
      if row is not None and fallback is None:
        fallback = row
      lo = mid + 1
  if chosen is None and gens:
    chosen = probe(gens[-1])[0]
    chosen = chosen if chosen is not None else fallback
  if chosen is None:
    return SearchResult(method="kv_fit", description=desc, family=place.name,
                        evaluations=ev.count,
                        infeasible_reason="no rollout pool size of the rule fits")
  return _pick("kv_fit", desc, place.name, fs, [chosen], efficiency)


_RULES = ((verl_default, "colocated"), (openrlhf_split, None), (areal_split, "split_async_partial"),
          (kv_fit_split, "split"))


def rules_of_thumb(job: cm.RLJob, cluster: cm.Cluster,
                   efficiency: cm.Efficiency | None = None, framework: str = "any",
                   max_staleness: int = 0, partial_rollout: bool = False
                   ) -> tuple[SearchResult, ...]:
  """The plan of every rule of thumb whose mode the user allows, for ``job``
  on ``cluster``, in the space of the search's ``framework``.

  Args:
    job: The job.
    cluster: The cluster.
    efficiency: Efficiency parameters (defaults if None).
    framework: The search's framework (its pool sizes and layout options).
    max_staleness: Largest staleness allowed (the ``areal`` rule needs 1).
    partial_rollout: Whether partial rollouts are allowed (``areal`` needs them).
  """
  modes = fw_lib.allowed_modes(max_staleness, partial_rollout)
  out = []
  for rule, family in _RULES:
    if family is not None and not any(cm.placement(family).allows(m) for m in modes):
      continue
    out.append(rule(job, cluster, efficiency, framework))
  return tuple(out)
