"""One program for every family of a job: shared stage costs, the shared space's
exact and relaxed programs against each family's own, and its bad input."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
from costmodel._src.stages import registry
import search
from search._src import compile_cache
from search._src import evaluate
from search._src import family_search
from search._src import frameworks as fw_lib
from search._src import relax
from search._src import sharding
from search._src import shared as shared_lib
from search._src import shared_relax
from search._src import trace_cache

FAMILIES = ("colocated", "split")


@pytest.fixture(scope="module")
def spaces(search_job, cluster_2x8, compact_space):
  fw = fw_lib.get("any")
  return [fw.build(f, search_job, cluster_2x8, compact_space, "bf16") for f in FAMILIES]


@pytest.fixture(scope="module")
def shared(spaces):
  return shared_lib.SharedSpace(spaces)


def _plans(job):
  train = {"actor": cm.Parallel(tp=2.0)}
  return (cm.build_plan("colocated", job, {"all": 16.0}, train=train),
          cm.build_plan("split", job, {"gen": 6.0, "train": 10.0}, train=train))


def test_estimate_shared_is_each_plans_estimate(search_job, cluster_2x8):
  plans = _plans(search_job)
  f = jax.jit(lambda which, plans: cmi.estimate_shared(search_job, plans, which, cluster_2x8))
  for k, plan in enumerate(plans):
    own = cm.estimate(search_job, plan, cluster_2x8)
    got = f(jnp.int32(k), plans)[k]
    assert got.stage_names == own.stage_names
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(own), strict=True):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_stages_with_value_only_differences_are_costed_once(search_job, cluster_2x8,
                                                           monkeypatch):
  calls = []
  for kind, fn in list(registry.STAGE_FUNCTIONS.items()):
    monkeypatch.setitem(registry.STAGE_FUNCTIONS, kind,
                        lambda *a, fn=fn, kind=kind: (calls.append(kind), fn(*a))[1])
  jax.make_jaxpr(lambda w, p: cmi.estimate_shared(search_job, p, w, cluster_2x8))(
      0, _plans(search_job))
  # Generation, scoring, training: once for both families. The weight sync differs
  # in structure (within one pool or across two), so each family costs its own;
  # only the colocated family has a switch.
  assert sorted(calls) == sorted(["generate", "cpu", "infer", "infer", "train", "sync", "sync",
                                  "switch"])


def test_widen_keeps_a_familys_columns_and_names_its_family(shared, spaces):
  assert shared.names[-1] == shared_lib.FAMILY
  assert set(shared.names[:-1]) == {n for fs in spaces for n in fs.names}
  for k, fs in enumerate(spaces):
    rows = np.asarray([[v.options[-1] for v in fs.vars]], np.float32)
    wide = shared.widen(k, rows)
    np.testing.assert_array_equal(wide[:, shared.columns[k]], rows)
    assert wide[0, -1] == k
    assert [shared.names[c] for c in shared.columns[k]] == list(fs.names)


def test_shared_exact_program_scores_as_each_familys_own(shared, spaces):
  eff = cm.Efficiency()
  rng = np.random.default_rng(0)
  for fs in spaces:
    rows = np.stack([[rng.choice(v.options) for v in fs.vars] for _ in range(40)])
    own = evaluate.Evaluator(fs, eff, full=True, shared=False).stage_scores(rows)
    got = evaluate.Evaluator(fs, eff, full=True, shared=shared).stage_scores(rows)
    assert got[1] == own[1]  # the family's own stage names
    ok = np.isfinite(own[0].step_time_s)
    assert ok.sum() > 10
    np.testing.assert_allclose(got[0].step_time_s[ok], own[0].step_time_s[ok], rtol=1e-6)
    np.testing.assert_array_equal(got[0].feasible, own[0].feasible)
    np.testing.assert_allclose(got[2][ok], own[2][ok], rtol=1e-5, atol=1e-4)


def test_shared_relaxed_objective_and_gradient_are_the_familys(shared, spaces):
  eff = cm.Efficiency()
  for k, fs in enumerate(spaces):
    x0, _, _ = fs.init_relaxed(np.random.default_rng(k), 4)
    tau = np.full(4, 0.1, np.float32)
    own = relax.objective_and_grad(fs, eff, x0, tau, weight=3.0)
    got = relax.objective_and_grad(shared, eff, shared.widen(k, x0.astype(np.float32), True),
                                   tau, weight=3.0)
    for a, b in zip(got[:3], own[:3], strict=True):
      np.testing.assert_allclose(a, b, rtol=2e-5)
    np.testing.assert_allclose(got[3][:, shared.columns[k]], own[3], rtol=1e-3, atol=1e-5)
    others = np.setdiff1d(np.arange(len(shared.names)), shared.columns[k])
    assert np.all(np.isfinite(got[3])) and np.all(got[3][:, others] == 0.0)


def test_shared_relaxed_loop_keeps_each_start_in_its_family(shared, spaces):
  # The searches' settings (16 starts a family, 60 steps): the loops are the
  # programs those searches compile.
  eff = cm.Efficiency()
  cfg = relax.RelaxConfig(steps=60)
  inits = [fs.init_relaxed(np.random.default_rng(k), 16) for k, fs in enumerate(spaces)]
  outs = shared_relax.run(shared, eff, inits, cfg)
  for fs, (x0, lo, hi), out in zip(spaces, inits, outs, strict=True):
    assert out.x.shape == x0.shape and out.values.shape == x0.shape
    assert out.history_s.shape == (60,)
    assert np.all(out.x >= lo - 1e-6) and np.all(out.x <= hi + 1e-6)
    own = relax.run(fs, fs.job, fs.cluster, eff, x0, lo, hi, cfg)
    # The same optimisation; Adam's unit steps on near-zero gradients let the
    # points drift apart in flat directions, the step times stay close.
    np.testing.assert_allclose(out.step_time_s, own.step_time_s, rtol=0.05)


def test_the_part_that_builds_the_loop_tells_on_traced_before_it_compiles(shared, spaces,
                                                                          monkeypatch):
  # Two parts; the first waits, so the second builds the program. on_traced
  # (which starts the exact program's compilation) must come when the loop is
  # traced, not when the second part's compilation ends.
  events = []
  build = trace_cache._build

  def recorded_build(*args):
    out = build(*args)
    events.append("compiled")
    return out

  real_run = relax.run
  calls, lock = [], threading.Lock()

  def run_part(*args, **kwargs):
    with lock:
      calls.append(1)
      first = len(calls) == 1
    if first:
      threading.Event().wait(1.0)
    return real_run(*args, **kwargs)

  monkeypatch.setattr(sharding, "cores", lambda: 2)
  monkeypatch.setattr(trace_cache, "_build", recorded_build)
  monkeypatch.setattr(relax, "run", run_part)
  inits = [fs.init_relaxed(np.random.default_rng(k), 2) for k, fs in enumerate(spaces)]
  # A schedule of its own: a program not yet built in this process.
  cfg = relax.RelaxConfig(steps=2, learning_rate=0.123)
  shared_relax.run(shared, cm.Efficiency(), inits, cfg, on_traced=lambda: events.append("traced"))
  assert events == ["traced", "compiled"]


def test_search_of_two_families_matches_each_familys_own(search_job, cluster_2x8,
                                                        compact_space, split_search):
  both = search.optimize(search_job, cluster_2x8, families=list(FAMILIES), starts=16,
                         steps=60, seed=0, space=compact_space, relaxed="on")
  assert set(both.best_by_family_s) == set(FAMILIES)
  # The split family's best is its search alone (the same starts and discrete
  # phases; the relaxed points may drift apart in flat directions).
  assert np.isclose(both.best_by_family_s["split"], split_search.best_by_family_s["split"],
                    rtol=0.02)
  assert both.best_estimate.step_time_s <= split_search.best_estimate.step_time_s * 1.02


def test_a_small_finite_difference_loop_starts_once_the_exact_program_is_traced(shared, spaces,
                                                                     monkeypatch):
  # A small finite-difference loop's level-0 step compiles sooner than the exact program,
  # so the exact program is traced (and starts compiling) first; a reverse-mode
  # loop or a long one goes first instead.
  small = relax.RelaxConfig(steps=60)
  assert family_search._exact_first(shared, small, 16)
  assert not family_search._exact_first(shared, small._replace(gradient="reverse"), 16)
  assert not family_search._exact_first(shared, small._replace(steps=10**6), 16)
  events = []
  warm, run = evaluate.Evaluator.warm, shared_relax.run

  def recorded_warm(self, on_traced=None):
    assert on_traced is not None  # the search waits for the trace
    return warm(self, on_traced=lambda: (events.append("exact traced"), on_traced()))

  monkeypatch.setattr(evaluate.Evaluator, "warm", recorded_warm)
  monkeypatch.setattr(shared_relax, "run",
                      lambda *a, **k: (events.append("relaxed loop"), run(*a, **k))[1])
  out = family_search.search_shared(spaces, cm.Efficiency(), starts=2, seed=0,
                                    cfg=relax.RelaxConfig(steps=2, learning_rate=0.123))
  assert events == ["exact traced", "relaxed loop"]
  assert [run_.fs.family for run_, _, _ in out] == list(FAMILIES)
  with pytest.raises(ValueError, match="on_traced needs full=True"):
    evaluate.Evaluator(spaces[0]).warm(on_traced=lambda: None)


def test_one_program_is_built_once_for_concurrent_callers():
  traces = []

  @jax.jit
  def f(x):
    traces.append(1)
    return x * 2.0

  args = (jnp.arange(3.0),)
  out = []
  threads = [threading.Thread(target=lambda: out.append(trace_cache.call(
      "test_concurrent", f, (), "k", args, {}, on_traced=lambda: None))) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert traces == [1] and len(out) == 4


def test_bad_input(spaces, shared, search_job, cluster_2x8, compact_space):
  with pytest.raises(ValueError, match="spaces has 1 family, needs at least 2"):
    shared_lib.SharedSpace(spaces[:1])
  other = fw_lib.get("any").build("split", cm.RLJob("grpo", search_job.actor), cluster_2x8,
                                  compact_space, "bf16")
  with pytest.raises(ValueError, match="another job or cluster"):
    shared_lib.SharedSpace([spaces[0], other])
  with pytest.raises(ValueError, match="shared= needs full=True"):
    evaluate.Evaluator(spaces[0], shared=shared)
  with pytest.raises(ValueError, match="is not one of its spaces"):
    shared.index_of(fw_lib.get("any").build("split_async", search_job, cluster_2x8,
                                            compact_space, "bf16"))


def test_a_search_registers_its_program_for_full_evaluators(shared, spaces):
  shared_lib.register(shared)
  assert evaluate.Evaluator(spaces[1], full=True).shared is shared
  assert evaluate.Evaluator(spaces[1], full=True, shared=False).shared is None
  assert evaluate.Evaluator(spaces[1]).shared is None  # the lean scorer keeps its own


@pytest.mark.parametrize("relaxed", ["on", "off"])
def test_whole_estimates_come_from_the_top_plans_families_with_the_relaxed_loop(
    search_job, cluster_2x8, compact_space, spaces, monkeypatch, relaxed):
  # With the relaxed loop, only the families of the top plans compile their own
  # whole-estimate program; without it, one program for every family compiles in
  # the background.
  calls = []
  compiled = trace_cache.compiled
  options = {}
  monkeypatch.setattr(trace_cache, "compiled", lambda name, jitted, static, key, args, opts, **k: (
      calls.append((name, static)), options.setdefault(name, opts),
      compiled(name, jitted, static, key, args, opts, **k))[-1])
  res = search.optimize(search_job, cluster_2x8, families=list(FAMILIES), starts=4, steps=5,
                        seed=0, space=compact_space, top_k=1, relaxed=relaxed)
  assert res.feasible and res.top_families == (res.family,)
  names = [name for name, _ in calls]
  # Without the relaxed loop the ranking program is compiled for compile time.
  assert options["shared_ranking"] == (compile_cache.FORWARD if relaxed == "on"
                                       else compile_cache.FAST_COMPILE)
  assert "shared_ranking" in names
  own = [static for name, static in calls if name == "exact_estimates"]
  if relaxed == "on":
    assert "shared_estimates" not in names
    assert own == [(spaces[FAMILIES.index(res.family)].structure,)]
  else:
    assert "shared_estimates" in names and not own
  assert shared_lib.holding(spaces[0].structure).whole == (relaxed == "off")
  # The family's own program gives the shared evaluator's whole estimates.
  ev = evaluate.Evaluator(spaces[0], full=True, shared=shared_lib.SharedSpace(spaces))
  row = np.asarray([[float(v.options[0]) for v in spaces[0].vars]])
  own = evaluate.Evaluator(spaces[0], full=True, shared=False).estimates(row)[0]
  assert float(ev.estimates(row)[0].step_time_s) == float(own.step_time_s)


def test_the_fast_ranking_program_scores_as_the_default_one(spaces):
  rng = np.random.default_rng(0)
  rows = np.asarray([[float(rng.choice(v.options)) for v in spaces[1].vars] for _ in range(64)])
  got = [evaluate.Evaluator(spaces[1], full=True, shared=shared_lib.SharedSpace(
      spaces, fast_ranking=fast)).scores(rows) for fast in (False, True)]
  assert np.isfinite(got[0][0]).any()
  for a, b in zip(got[0], got[1], strict=True):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=2e-6, atol=1e-6)


def test_the_family_with_the_best_relaxed_time_compiles_its_estimates_first():
  cfg = relax.RelaxConfig()

  def out(steps, penalties):
    n = len(steps)
    return relax.RelaxOutput(x=np.zeros((n, 1)), values=np.zeros((n, 1)),
                             step_time_s=np.asarray(steps, float),
                             penalty=np.asarray(penalties, float), history_s=np.zeros(0))

  class Ev:
    prepared = 0

    def prepare_estimates(self):
      self.prepared += 1

  # Family 1's 90 s start breaks the memory limit; family 2's 95 s is the best feasible one.
  outs = [out([120.0, 100.0], [0.0, 0.0]), out([90.0, 130.0], [0.5, 0.0]),
          out([95.0], [cfg.feasible_tol])]
  assert [family_search.relaxed_best(o, cfg) for o in outs] == [100.0, 130.0, 95.0]
  evs = [Ev(), Ev(), Ev()]
  family_search._prepare_likely_top(evs, outs, cfg)
  assert [ev.prepared for ev in evs] == [0, 0, 1]
  # No relaxed phase (NaN) or no feasible start: nothing is compiled ahead.
  evs = [Ev(), Ev()]
  family_search._prepare_likely_top(evs, [out([np.nan], [np.nan]), out([80.0], [1.0])], cfg)
  assert [ev.prepared for ev in evs] == [0, 0]


def test_prepare_estimates_compiles_the_program_estimates_then_use(spaces):
  ev = evaluate.Evaluator(spaces[0], full=True, shared=shared_lib.SharedSpace(spaces))
  ev.prepare_estimates()
  pending = ev._estimating
  ev.prepare_estimates()  # already compiling: the same job
  assert ev._estimating is pending
  row = np.asarray([[float(v.options[0]) for v in spaces[0].vars]])
  own = evaluate.Evaluator(spaces[0], full=True, shared=False).estimates(row)[0]
  assert float(ev.estimates(row)[0].step_time_s) == float(own.step_time_s)
  assert pending.done() and pending.exception() is None
  with pytest.raises(ValueError, match="need full=True"):
    evaluate.Evaluator(spaces[0]).prepare_estimates()
