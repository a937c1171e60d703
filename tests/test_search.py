"""Tests of the layout search: rounding validity, determinism, agreement with
exhaustive enumeration, infeasibility reports.

One small problem (GRPO on Qwen2.5-1.5B, 16 H100, the compact space, the
``split`` family) serves every test so the relaxed loop compiles once.
"""

import re

import jax
import numpy as np
import pytest

import costmodel as cm
import search
from search._src import evaluate
from search._src import relax
from search._src import rounding
from search._src import space as space_lib

FAMILY = "split"


@pytest.fixture(scope="module")
def job():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=128.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


@pytest.fixture(scope="module")
def cluster():
  return cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)


@pytest.fixture(scope="module")
def space():
  return search.SpaceOptions.compact()


@pytest.fixture(scope="module")
def result(job, cluster, space):
  return search.optimize(job, cluster, families=[FAMILY], starts=16, steps=60, seed=0,
                         space=space)


@pytest.fixture(scope="module")
def enumerated(job, cluster, space):
  return search.enumerate_plans(job, cluster, FAMILY, space=space, chunk_size=16384)


def test_public_names():
  for name in search.__all__:
    assert getattr(search, name) is not None, name


def test_result_fields(result):
  assert result.feasible and result.family == FAMILY
  assert result.best_plan == result.top[0][0]
  assert 1 <= len(result.top) <= 5
  times = [float(e.step_time_s) for _, e in result.top]
  assert times == sorted(times)
  assert len(set(np.float32(times))) == len(times)  # distinct plans
  assert result.history[FAMILY].shape == (60,)
  assert np.isfinite(result.history[FAMILY][-1])
  assert np.isfinite(result.relaxed_bound_s[FAMILY])
  assert result.evaluations > 100
  assert result.best_by_family_s[FAMILY] == pytest.approx(times[0], rel=1e-6)


def test_top_plans_are_valid_and_feasible(result, job, cluster):
  for (plan, est), fam in zip(result.top, result.top_families, strict=True):
    cm.validate_plan(plan, job, cluster)
    assert bool(est.feasible) and fam == FAMILY
    assert not est.violations
  # The batched evaluation agrees with a direct call of the cost model.
  exact = cm.estimate(job, result.best_plan, cluster)
  assert float(exact.step_time_s) == pytest.approx(float(result.best_estimate.step_time_s),
                                                   rel=1e-5)


def test_rounded_candidates_pass_validation(job, cluster, space):
  fs = space_lib.build(FAMILY, job, cluster, space)
  rng = np.random.default_rng(1)
  x0, lo, hi = fs.init_relaxed(rng, 16)  # the shapes of ``result``: no recompilation
  out = relax.run(fs, job, cluster, cm.Efficiency(), x0, lo, hi, relax.RelaxConfig(steps=60))
  cand = rounding.candidates(fs, out.values, rng)
  assert len(cand) > 16
  for row in cand[rng.choice(len(cand), size=min(len(cand), 150), replace=False)]:
    cm.validate_plan(fs.to_plan(row), job, cluster)
  # Every candidate sits on the option grid of each variable.
  for j, var in enumerate(fs.vars):
    assert np.isin(cand[:, j], var.options).all(), var.name
  scores = evaluate.Evaluator(fs).scores(cand)
  assert scores.feasible.any()
  assert np.all(scores.excess[scores.feasible] <= 1e-6)


def test_same_seed_same_plan(result, job, cluster, space):
  again = search.optimize(job, cluster, families=[FAMILY], starts=16, steps=60, seed=0,
                          space=space)
  assert again.best_plan == result.best_plan
  assert float(again.best_estimate.step_time_s) == float(result.best_estimate.step_time_s)
  np.testing.assert_array_equal(again.history[FAMILY], result.history[FAMILY])


def test_search_within_two_percent_of_enumeration(result, enumerated):
  assert enumerated.best_plan is not None
  best = float(result.best_estimate.step_time_s)
  assert best >= enumerated.best_step_time_s * (1 - 1e-5)  # enumeration is the optimum
  assert best <= enumerated.best_step_time_s * 1.02


def test_enumeration_counts_the_valid_space(enumerated, job, cluster, space):
  size = search.space_size(job, cluster, FAMILY, space)
  assert enumerated.space_size == size
  assert enumerated.evaluations >= size
  assert 10_000 < size < 2_000_000


def test_enumeration_chunk_size_does_not_change_the_optimum(job, cluster, space):
  a = search.enumerate_plans(job, cluster, FAMILY, space=space, chunk_size=2048)
  b = search.enumerate_plans(job, cluster, FAMILY, space=space, chunk_size=16384)
  assert a.best_plan == b.best_plan
  assert a.best_step_time_s == pytest.approx(b.best_step_time_s, rel=1e-6)
  assert [float(e.step_time_s) for _, e in a.top] == pytest.approx(
      [float(e.step_time_s) for _, e in b.top], rel=1e-6)


def test_enumeration_refuses_a_space_above_max_plans(job, cluster, space):
  with pytest.raises(ValueError, match="max_plans"):
    search.enumerate_plans(job, cluster, FAMILY, space=space, max_plans=10)


def test_impossible_job_names_the_stage(job, cluster, space):
  # Responses of 2M tokens: one sequence's KV cache alone outgrows a GPU.
  huge = job.replace(response=cm.ResponseLength.from_mean_max(1.0e6, 2.0e6))
  res = search.optimize(huge, cluster, families=[FAMILY], starts=16, steps=60, space=space)
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
def test_bad_arguments_raise(job, cluster, kwargs, match):
  with pytest.raises(ValueError, match=match):
    search.optimize(job, cluster, **kwargs)


def test_split3_needs_a_critic(job, cluster):
  assert space_lib.build("split3", job, cluster) is None
  assert "split3" not in search.default_families(job)
  assert "split3" in search.default_families(cm.RLJob("ppo", job.actor))


def test_relaxed_values_respect_bounds(job, cluster):
  fs = space_lib.build(FAMILY, job, cluster)
  x0, lo, hi = fs.init_relaxed(np.random.default_rng(0), 64)
  assert np.all(x0 >= lo - 1e-9) and np.all(x0 <= hi + 1e-9)
  v = np.asarray(jax.vmap(fs.relaxed_values)(x0))
  pools = v[:, [fs.index("pool.gen"), fs.index("pool.train")]]
  np.testing.assert_allclose(pools.sum(-1), cluster.n_gpus, rtol=1e-5)
  mf = v[:, fs.index("engine.memory_fraction")]
  assert np.all((mf > 0.3 - 1e-6) & (mf < 0.95 + 1e-6))
  zero3 = x0[:, fs.index("actor.zero")] == 3
  assert np.all(v[zero3, fs.index("actor.tp")] == 1.0)
