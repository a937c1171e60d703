"""Tests of the layout search: rounding validity, determinism, agreement with
exhaustive enumeration, infeasibility reports.

One small problem (GRPO on Qwen2.5-1.5B, 16 H100, the compact space, the
``split`` family) serves every test so the relaxed loop compiles once.
"""

import itertools
import re

import jax
import numpy as np
import pytest

import costmodel as cm
import search
from search._src import block_sweep
from search._src import compile_cache
from search._src import evaluate
from search._src import relax
from search._src import result as result_lib
from search._src import rounding
from search._src import space as space_lib

FAMILY = "split"


@pytest.fixture(scope="module")
def enumerated(search_job, cluster_2x8, compact_space):
  return search.enumerate_plans(search_job, cluster_2x8, FAMILY, space=compact_space,
                                chunk_size=16384)


def test_result_fields(split_search):
  assert split_search.feasible and split_search.family == FAMILY
  assert split_search.best_plan == split_search.top[0][0]
  assert 1 <= len(split_search.top) <= 5
  times = [float(e.step_time_s) for _, e in split_search.top]
  assert times == sorted(times)
  assert len(set(np.float32(times))) == len(times)  # distinct plans
  assert split_search.history[FAMILY].shape == (60,)
  assert np.isfinite(split_search.history[FAMILY][-1])
  assert np.isfinite(split_search.relaxed_bound_s[FAMILY])
  assert split_search.evaluations > 100
  assert split_search.best_by_family_s[FAMILY] == pytest.approx(times[0], rel=1e-6)


def test_top_plans_are_valid_and_feasible(split_search, search_job, cluster_2x8):
  for (plan, est), fam in zip(split_search.top, split_search.top_families, strict=True):
    cm.validate_plan(search_job, plan, cluster_2x8)
    assert bool(est.feasible) and fam == FAMILY
    assert not est.violations
  # The batched evaluation agrees with a direct call of the cost model.
  exact = cm.estimate(search_job, split_search.best_plan, cluster_2x8)
  assert float(exact.step_time_s) == pytest.approx(float(split_search.best_estimate.step_time_s),
                                                   rel=1e-5)


def test_rounded_candidates_pass_validation(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  rng = np.random.default_rng(1)
  x0, lo, hi = fs.init_relaxed(rng, 16)  # the shapes of ``split_search``: no recompilation
  out = relax.run(fs, search_job, cluster_2x8, cm.Efficiency(), x0, lo, hi,
                  relax.RelaxConfig(steps=60))
  cand = rounding.candidates(fs, out.values, rng)
  assert len(cand) > 16
  for row in cand[rng.choice(len(cand), size=min(len(cand), 150), replace=False)]:
    cm.validate_plan(search_job, fs.to_plan(row), cluster_2x8)
  # Every candidate sits on the option grid of each variable.
  for j, var in enumerate(fs.vars):
    assert np.isin(cand[:, j], var.options).all(), var.name
  scores = evaluate.Evaluator(fs).scores(cand)
  assert scores.feasible.any()
  assert np.all(scores.excess[scores.feasible] <= 1e-6)


def test_same_seed_same_plan(split_search, search_job, cluster_2x8, compact_space):
  again = search.optimize(search_job, cluster_2x8, families=[FAMILY], starts=16, steps=60, seed=0,
                          space=compact_space, relaxed="on")
  assert again.best_plan == split_search.best_plan
  assert float(again.best_estimate.step_time_s) == float(split_search.best_estimate.step_time_s)
  np.testing.assert_array_equal(again.history[FAMILY], split_search.history[FAMILY])


def test_search_within_two_percent_of_enumeration(split_search, enumerated):
  assert enumerated.best_plan is not None
  best = float(split_search.best_estimate.step_time_s)
  assert best >= enumerated.best_step_time_s * (1 - 1e-5)  # enumeration is the optimum
  assert best <= enumerated.best_step_time_s * 1.02


def test_enumeration_counts_the_valid_space(enumerated, search_job, cluster_2x8, compact_space):
  size = search.space_size(search_job, cluster_2x8, FAMILY, compact_space)
  assert enumerated.space_size == size
  assert enumerated.evaluations >= size
  assert 10_000 < size < 2_000_000


def test_enumeration_chunk_size_does_not_change_the_optimum(search_job, cluster_2x8, compact_space):
  a = search.enumerate_plans(search_job, cluster_2x8, FAMILY, space=compact_space, chunk_size=2048)
  b = search.enumerate_plans(search_job, cluster_2x8, FAMILY, space=compact_space, chunk_size=16384)
  assert a.best_plan == b.best_plan
  assert a.best_step_time_s == pytest.approx(b.best_step_time_s, rel=1e-6)
  assert [float(e.step_time_s) for _, e in a.top] == pytest.approx(
      [float(e.step_time_s) for _, e in b.top], rel=1e-6)


def test_enumeration_refuses_a_space_above_max_plans(search_job, cluster_2x8, compact_space):
  with pytest.raises(ValueError, match="max_plans"):
    search.enumerate_plans(search_job, cluster_2x8, FAMILY, space=compact_space, max_plans=10)


def test_impossible_job_names_the_stage(search_job, cluster_2x8, compact_space):
  # Responses of 2M tokens: one sequence's KV cache alone outgrows a GPU.
  huge = search_job.replace(response=cm.ResponseLength.from_mean_max(1.0e6, 2.0e6))
  res = search.optimize(huge, cluster_2x8, families=[FAMILY], starts=16, steps=60,
                        space=compact_space)
  assert res.best_plan is None and not res.feasible
  assert res.top == ()
  assert re.search(r"stage '\w+' on pool '\w+' needs [0-9.]+ GiB per GPU .* short by "
                   r"[0-9.]+ GiB", res.infeasible_reason), res.infeasible_reason


@pytest.mark.parametrize("kwargs, match", [
    (dict(starts=0), "starts=0"),
    (dict(steps=-1), "steps=-1"),
    (dict(top_k=0), "top_k=0"),
    (dict(families=["nope"]), "family='nope'"),
])
def test_bad_arguments_raise(search_job, cluster_2x8, kwargs, match):
  with pytest.raises(ValueError, match=match):
    search.optimize(search_job, cluster_2x8, **kwargs)


def test_split3_needs_a_critic(search_job, cluster_2x8):
  assert space_lib.build("split3", search_job, cluster_2x8) is None
  assert "split3" not in search.default_families(search_job)
  assert "split3" in search.default_families(cm.RLJob("ppo", search_job.actor))


def _relaxed_values(fs, x0):
  """The continuous values of relaxed parameters ``x0``, on the space's cluster."""
  return np.asarray(jax.vmap(lambda x: fs.relaxed_values(x, fs.cluster.n_gpus))(x0))


def test_relaxed_values_respect_bounds(search_job, cluster_2x8):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8)
  x0, lo, hi = fs.init_relaxed(np.random.default_rng(0), 64)
  assert np.all(x0 >= lo - 1e-9) and np.all(x0 <= hi + 1e-9)
  v = _relaxed_values(fs, x0)
  pools = v[:, [fs.index("pool.gen"), fs.index("pool.train")]]
  np.testing.assert_allclose(pools.sum(-1), cluster_2x8.n_gpus, rtol=1e-5)
  mf = v[:, fs.index("engine.memory_fraction")]
  assert np.all((mf > 0.3 - 1e-6) & (mf < 0.95 + 1e-6))
  zero3 = x0[:, fs.index("actor.zero")] == 3
  assert np.all(v[zero3, fs.index("actor.tp")] == 1.0)


def test_evaluator_warm_compiles_ahead_and_counts_nothing(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  x0 = fs.init_relaxed(np.random.default_rng(3), 4)[0]
  cand = rounding.candidates(fs, _relaxed_values(fs, x0),
                             np.random.default_rng(3), corners=0)
  ev = evaluate.Evaluator(fs, full=True)
  ev.warm()
  assert ev.count == 0
  with compile_cache.CompileClock() as clock:
    warmed = ev.scores(cand)
  assert clock.seconds == 0.0  # the program was compiled by ``warm``
  assert ev.count == len(cand)
  fresh = evaluate.Evaluator(fs, full=True).scores(cand)
  np.testing.assert_array_equal(warmed.step_time_s, fresh.step_time_s)
  np.testing.assert_array_equal(warmed.feasible, fresh.feasible)


def test_lean_scores_equal_whole_estimates(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  x0 = fs.init_relaxed(np.random.default_rng(5), 8)[0]
  cand = rounding.candidates(fs, _relaxed_values(fs, x0),
                             np.random.default_rng(5), corners=2)
  lean = evaluate.Evaluator(fs).scores(cand)  # the enumerations' program
  whole = evaluate.Evaluator(fs, full=True).scores(cand)
  np.testing.assert_allclose(lean.step_time_s, whole.step_time_s, rtol=1e-5)
  np.testing.assert_array_equal(lean.feasible, whole.feasible)
  np.testing.assert_allclose(lean.excess, whole.excess, rtol=1e-5, atol=1e-7)


def test_block_sweep_finds_the_best_of_each_block(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  ev = evaluate.Evaluator(fs, full=True)
  x0 = fs.init_relaxed(np.random.default_rng(7), 8)[0]
  cand = rounding.candidates(fs, _relaxed_values(fs, x0),
                             np.random.default_rng(7), corners=0)
  ranked = rounding.score(ev, cand)
  k = len(ranked.values) // 2  # a middling plan
  one = result_lib.Ranked(*(a[k:k + 1] for a in ranked))
  start = one.values[0]
  swept = block_sweep.block_sweep(ev, one, plans=1, rounds=1)
  # By hand: the best plan that differs from ``start`` in the engine block only.
  idx = list(dict(fs.blocks)["engine"])
  grid = np.asarray(list(itertools.product(*[fs.vars[j].options for j in idx])))
  rows = np.tile(start, (len(grid), 1))
  rows[:, idx] = grid
  rows = rows[fs.valid(rows)]
  s = ev.scores(rows)
  best_engine = result_lib.objective(s.step_time_s, s.feasible, s.excess).min()
  assert swept.objective[0] <= best_engine * (1 + 1e-6)
  assert swept.objective[0] <= one.objective[0]
  with pytest.raises(ValueError, match="plans=0"):
    block_sweep.block_sweep(ev, one, plans=0)


def test_block_sweep_scores_no_sweep_twice_and_moves_starts_in_step(search_job, cluster_2x8,
                                                                      compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  x0 = fs.init_relaxed(np.random.default_rng(3), 8)[0]
  cand = rounding.candidates(fs, _relaxed_values(fs, x0),
                             np.random.default_rng(3), corners=0)
  ev = evaluate.Evaluator(fs, full=True)
  ranked = rounding.score(ev, cand)
  worst = result_lib.Ranked(*(a[-6:] for a in ranked))  # plans far from block-optimal
  calls = []
  scores = ev.scores
  ev.scores = lambda values, **kw: (calls.append(np.asarray(values)), scores(values, **kw))[1]
  swept = block_sweep.block_sweep(ev, worst, plans=3, rounds=4)
  # One call scores the starts, then at most one a block per round (two with the
  # engine memory fractions retried), whatever the number of starts.
  blocks = [b for b, _ in fs.blocks]
  assert len(calls) <= 1 + 2 * len(blocks) * 4
  # No row set is scored twice: a sweep met again reuses its best row.
  sets = [frozenset(r.tobytes() for r in c) for c in calls[1:]]
  assert len(sets) == len(set(sets))
  assert swept.objective[0] <= worst.objective.min()


@pytest.mark.parametrize("family", ["colocated", "split3"])
def test_a_block_of_a_valid_row_is_valid_by_its_own_rules(family, ppo_job, cluster_2x8):
  # What the block sweep relies on (its masks of a block's grid per pool split):
  # replacing one role or engine block of a valid row, the row stays valid
  # exactly when the block's own rules hold; a grid of pool sizes, when each
  # block's rules hold on the pool sizes it reads.
  fs = space_lib.build(family, ppo_job, cluster_2x8, search.SpaceOptions(max_pp=2))
  rows = baselines_sample(fs, 6)
  assert fs.valid(rows).all()
  checked = 0
  for block, idx in fs.blocks:
    grid = (fs.pool_grid() if block == "pools"
            else fs.option_grid(list(idx), 4096, np.random.default_rng(1)))
    for row in rows:
      cand = np.tile(row, (len(grid), 1))
      cand[:, list(idx)] = grid
      own = fs.valid_replacing(row, idx, grid)
      np.testing.assert_array_equal(own, fs.valid(cand), err_msg=block)
      checked += int(own.sum()) * int((~own).sum()) > 0  # both outcomes occur
  assert checked >= len(rows)
  assert fs.block_pools("engine") == (fs.index(f"pool.{fs.rollout_pool}"),)


def test_option_and_pool_grids_by_hand(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  idx = list(dict(fs.blocks)["engine"])
  by_hand = np.asarray(list(itertools.product(*[fs.vars[j].options for j in idx])))
  np.testing.assert_array_equal(fs.option_grid(idx), by_hand)
  pools = list(dict(fs.blocks)["pools"])
  every = np.asarray(list(itertools.product(*[fs.vars[j].options for j in pools])))
  fits = every[every.sum(-1) <= cluster_2x8.n_gpus]
  assert 0 < len(fits) < len(every)  # the rule drops some combinations here
  np.testing.assert_array_equal(fs.pool_grid(), fits)
  # Sampled beyond max_rows: rows of options that fit, at most max_rows.
  sampled = fs.pool_grid(3, np.random.default_rng(0))
  assert len(sampled) <= 3
  for row in sampled:
    assert any(np.array_equal(row, f) for f in fits)
  with pytest.raises(ValueError, match="max_rows=3 needs an rng"):
    fs.pool_grid(3)


def test_block_sweep_moves_the_pool_sizes_and_sweeps_extra_splits(search_job, cluster_2x8,
                                                                  compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  ev = evaluate.Evaluator(fs, full=True)
  ranked = rounding.score(ev, baselines_sample(fs, 64))
  one = result_lib.Ranked(*(a[-1:] for a in ranked))  # the worst sampled plan
  start = one.values[0]
  swept = block_sweep.block_sweep(ev, one, plans=1, rounds=1)
  # By hand: the best plan that differs from ``start`` in its pool sizes only.
  idx = list(dict(fs.blocks)["pools"])
  grid = np.asarray(list(itertools.product(*[fs.vars[j].options for j in idx])))
  grid = grid[grid.sum(-1) <= cluster_2x8.n_gpus]
  rows = np.tile(start, (len(grid), 1))
  rows[:, idx] = grid
  rows = rows[fs.valid(rows)]
  assert len(rows) > 1  # the pool block has somewhere to go
  s = ev.scores(rows)
  best_pools = result_lib.objective(s.step_time_s, s.feasible, s.excess).min()
  assert swept.objective[0] <= best_pools * (1 + 1e-6)
  # ``extra``: the best plan of another split is swept too, so the result is at
  # least as good as sweeping from that plan alone.
  pools_of = lambda v: tuple(v[idx])
  other = next(i for i in range(len(ranked.values))
               if pools_of(ranked.values[i]) != pools_of(start))
  extra = result_lib.Ranked(*(a[other:other + 1] for a in ranked))
  alone = block_sweep.block_sweep(ev, extra, plans=1, rounds=1)
  both = block_sweep.block_sweep(ev, one, plans=1, rounds=1, extra=extra)
  assert both.objective[0] <= min(alone.objective[0], swept.objective[0]) * (1 + 1e-6)


def baselines_sample(fs, n):
  from search._src import valid_space  # pylint: disable=g-import-not-at-top
  return valid_space.Blocks(fs).sample(np.random.default_rng(3), n)


def test_stage_scores_match_whole_estimates(search_job, cluster_2x8, compact_space):
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  rows = baselines_sample(fs, 40)
  lean = evaluate.Evaluator(fs, full=True).stage_scores(rows)
  whole = evaluate.Evaluator(fs).scores(rows)  # the enumerations' program
  est = evaluate.Evaluator(fs, full=True).estimates(rows[:3])
  assert lean[1] == tuple(est[0].stage_names)
  assert lean[2].shape == lean[3].shape == (len(rows), len(lean[1]))
  np.testing.assert_allclose(lean[0].step_time_s, whole.step_time_s, rtol=1e-5)
  np.testing.assert_array_equal(lean[0].feasible, whole.feasible)
  for i in range(3):  # a stage's duration is its end minus its start
    end = np.asarray(est[i].end_s)
    np.testing.assert_allclose(lean[2][i], np.asarray(est[i].duration_s), rtol=1e-6)
    # The subtraction keeps float32 rounding of the end times, not of the durations.
    np.testing.assert_allclose(lean[2][i], end - np.asarray(est[i].start_s),
                               rtol=1e-6, atol=1e-6 * np.abs(end).max())
    np.testing.assert_allclose(lean[3][i], np.asarray(est[i].memory_excess), rtol=1e-6,
                               atol=1e-7)
  with pytest.raises(ValueError, match="stage_scores"):
    evaluate.Evaluator(fs).stage_scores(rows)


def test_block_sweep_couples_a_colocated_role_with_the_engines_memory(search_job, cluster_2x8):
  colocated = space_lib.build("colocated", search_job, cluster_2x8)
  split = space_lib.build(FAMILY, search_job, cluster_2x8)
  assert block_sweep._coupled(colocated, "actor") == colocated.index("engine.memory_fraction")
  assert block_sweep._coupled(colocated, "engine") is None
  assert block_sweep._coupled(split, "actor") is None  # the actor trains on its own pool


def test_ranking_rows_never_build_the_whole_estimate_program(search_job, cluster_2x8,
                                                             compact_space, compiled_programs):
  """A full evaluator scores rows (and their stages) with its ranking program
  alone; whole estimates build the other program, compiled for compile time."""
  built = compiled_programs
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  rows = baselines_sample(fs, 20)
  ev = evaluate.Evaluator(fs, full=True, shared=False)
  s = ev.scores(rows)
  _, names, dur, _ = ev.stage_scores(rows)
  assert built == [("exact_ranking", compile_cache.FORWARD)]
  assert dur.shape == (20, len(names))
  (est,) = ev.estimates(rows[:1])
  assert built[1:] == [("exact_estimates", compile_cache.FAST_COMPILE)]
  assert float(est.step_time_s) == pytest.approx(s.step_time_s[0], rel=1e-5)
  assert ev.count == 20 + 20 + 1


def test_warm_compiles_whole_estimates_beside_the_ranking_program(search_job, cluster_2x8,
                                                                  compact_space,
                                                                  compiled_programs):
  names = lambda: [name for name, _ in compiled_programs]
  fs = space_lib.build(FAMILY, search_job, cluster_2x8, compact_space)
  ev = evaluate.Evaluator(fs, full=True, shared=False)
  traced = []
  ev.warm(on_traced=lambda: traced.append(names()))
  assert traced == [["exact_ranking"]]  # called once the ranking program is traced
  ev._estimating.result()  # the background thread's compilation
  assert names() == ["exact_ranking", "exact_estimates"]
  assert ev.count == 0  # warming counts no evaluation


def test_first_copies_keeps_the_first_of_each_distinct_row():
  rng = np.random.default_rng(0)
  values = rng.integers(0, 3, (5000, 6)).astype(np.float64)
  _, first = np.unique(values, axis=0, return_index=True)
  np.testing.assert_array_equal(result_lib.first_copies(values), np.sort(first))
  # -0.0 and 0.0 are one value; an empty array has no rows.
  np.testing.assert_array_equal(result_lib.first_copies(np.array([[0.0, 1.0], [-0.0, 1.0],
                                                                 [2.0, 1.0]])), [0, 2])
  assert result_lib.first_copies(np.zeros((0, 4))).size == 0


@pytest.mark.parametrize("shape", [(5000, 6), (3000, 1), (1, 3)])
def test_distinct_rows_is_numpys_unique_over_rows(shape):
  rng = np.random.default_rng(1)
  values = rng.integers(0, 4, shape).astype(np.float64) * 8.0
  keys, inverse = result_lib.distinct_rows(values)
  want_keys, want_inverse = np.unique(values, axis=0, return_inverse=True)
  np.testing.assert_array_equal(keys, want_keys)
  np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
  np.testing.assert_array_equal(keys[inverse], values)
  # -0.0 and 0.0 are one value; no rows give no keys.
  keys, inverse = result_lib.distinct_rows(np.array([[0.0, 1.0], [-0.0, 1.0], [2.0, 1.0]]))
  np.testing.assert_array_equal(keys, [[0.0, 1.0], [2.0, 1.0]])
  np.testing.assert_array_equal(inverse, [0, 0, 1])
  keys, inverse = result_lib.distinct_rows(np.zeros((0, 4)))
  assert keys.shape == (0, 4) and inverse.shape == (0,)
  with pytest.raises(ValueError, match=r"distinct_rows: values has shape \(3,\)"):
    result_lib.distinct_rows(np.zeros(3))


def test_layout_columns_determine_the_layout_key(search_job, cluster_2x8, compact_space):
  for family in ("colocated", FAMILY):
    fs = space_lib.build(family, search_job, cluster_2x8, compact_space)
    columns = result_lib.layout_columns(fs.names)
    names = [fs.names[j] for j in columns]
    assert "engine.tp" in names and "actor.pp" in names
    assert not {"engine.max_seqs", "engine.memory_fraction", "actor.mb_train"} & set(names)
    x0 = fs.init_relaxed(np.random.default_rng(5), 16)[0]
    rows = rounding.candidates(fs, _relaxed_values(fs, x0),
                               np.random.default_rng(5), corners=8)
    keys = {}
    for row in rows:
      key = result_lib.layout_key(fs.to_plan(np.asarray(row, np.float64)), family)
      keys.setdefault(row[columns].tobytes(), set()).add(key)
    assert len(keys) > 1
    assert all(len(k) == 1 for k in keys.values())  # one layout key per layout columns
