"""The cut-DP baseline planner: quality against enumeration, validity, input
checks, determinism.

The problem is the search tests' (GRPO on Qwen2.5-1.5B, 16 H100, the compact
space, the on-policy families ``colocated`` and ``split``); one PPO job with a
reward model exercises the second cut (``split3``: actor pool vs critic pool).
"""

import numpy as np
import pytest

import costmodel as cm
import search

# The DP's plan may be at most this far above the exhaustive optimum.
GAP = 0.01
FAMILIES = ("colocated", "split")


@pytest.fixture(scope="module")
def dp(search_job, cluster_2x8, compact_space):
  return search.cut_dp(search_job, cluster_2x8, space=compact_space)


@pytest.fixture(scope="module")
def optimum(search_job, cluster_2x8, compact_space):
  return {f: search.enumerate_plans(search_job, cluster_2x8, f, space=compact_space,
                                    chunk_size=16384).best_step_time_s for f in FAMILIES}


def test_within_gap_of_the_exhaustive_optimum(dp, optimum):
  assert dp.method == "cut_dp" and dp.feasible
  assert set(dp.best_by_family_s) == set(FAMILIES)
  assert dp.best_step_time_s <= min(optimum.values()) * (1 + GAP)
  for f in FAMILIES:  # each family's best DP plan, not only the overall best
    assert dp.best_by_family_s[f] <= optimum[f] * (1 + GAP), f
    assert dp.best_by_family_s[f] >= optimum[f] * (1 - 1e-5), f


def test_plans_are_valid_exact_and_within_the_gpu_total(dp, search_job, cluster_2x8):
  assert dp.best_plan == dp.top[0][0] and dp.family == dp.top_families[0]
  times = [float(e.step_time_s) for _, e in dp.top]
  assert times == sorted(times) and times[0] == pytest.approx(dp.best_step_time_s)
  for (plan, est), fam in zip(dp.top, dp.top_families, strict=True):
    cm.validate_plan(search_job, plan, cluster_2x8)
    assert sum(float(p.gpus) for p in plan.pools) <= cluster_2x8.n_gpus
    assert plan.pool_names == cm.placement(fam).pools
    exact = cm.estimate(search_job, plan, cluster_2x8)
    assert float(exact.step_time_s) == pytest.approx(float(est.step_time_s), rel=1e-5)
    assert bool(est.feasible)
  assert dp.evaluations > 0 and dp.space_size > 0


def test_deterministic(dp, search_job, cluster_2x8, compact_space):
  again = search.cut_dp(search_job, cluster_2x8, space=compact_space)
  assert again.best_plan == dp.best_plan
  assert again.best_by_family_s == dp.best_by_family_s
  assert [p for p, _ in again.top] == [p for p, _ in dp.top]


def test_a_budget_still_returns_a_valid_plan(search_job, cluster_2x8, compact_space):
  res = search.cut_dp(search_job, cluster_2x8, budget_s=1e-3, space=compact_space,
                      families=("split",))
  assert res.feasible and res.family == "split"
  cm.validate_plan(search_job, res.best_plan, cluster_2x8)


def test_split3_cut_honours_the_gpu_total(h100, compact_space):
  m = cm.models.get("qwen2.5-1.5b")
  job = cm.RLJob("ppo", m, prompts_per_step=32.0, samples_per_prompt=4.0, reward_model=m)
  cluster = cm.Cluster(h100, gpus_per_node=8, nodes=1)
  res = search.cut_dp(job, cluster, space=compact_space, families=("split3",))
  assert res.feasible and res.family == "split3"
  plan = res.best_plan
  cm.validate_plan(job, plan, cluster)
  assert [p.name for p in plan.pools] == ["gen", "actor", "critic"]
  assert sum(float(p.gpus) for p in plan.pools) <= 8


@pytest.mark.parametrize("kwargs, field", [
    (dict(budget_s=-1.0), "budget_s"),
    (dict(budget_s=float("nan")), "budget_s"),
    (dict(keep=0), "keep"),
    (dict(combos=1.5), "combos"),
    (dict(top_k=0), "top_k"),
    (dict(families=("nope",)), "family"),
    (dict(families=("split_async",)), "family"),  # off-policy, not allowed by default
    (dict(families=()), "families"),
])
def test_bad_input_names_the_field(kwargs, field, search_job, cluster_2x8):
  with pytest.raises(ValueError, match=field):
    search.cut_dp(search_job, cluster_2x8, **kwargs)


def test_pool_level_by_hand():
  from search._src import valid_space
  # 512 = 2^9 -> bit length of its lowest set bit 10; 256 -> 9; 12 = 4 + 8 -> 3; 7 -> 1.
  np.testing.assert_array_equal(
      valid_space.pool_level(np.asarray([[512.0, 256.0], [512.0, 512.0], [12.0, 64.0],
                                       [7.0, 1024.0]])), [9, 10, 3, 1])
  assert valid_space.pool_level(np.zeros((2, 0))).tolist() == [64, 64]


def test_family_seeds_are_valid_coarse_plans_the_search_starts_from(
    search_job, cluster_2x8, compact_space, dp):
  from search._src import cut_dp
  from search._src import evaluate
  from search._src import space as space_lib
  fs = space_lib.build("split", search_job, cluster_2x8, compact_space)
  ev = evaluate.Evaluator(fs, full=True)
  seeds = cut_dp.family_seeds(fs, ev)
  assert len(seeds) and fs.valid(seeds).all()
  pools = list(dict(fs.blocks)["pools"])
  # Only the coarsest pool sizes that hold a plan: on 16 GPUs, multiples of 8 (level 4).
  assert (np.asarray(seeds[:, pools]) % 8 == 0).all()
  s = ev.scores(seeds)
  best_seed = float(np.min(np.where(s.feasible, s.step_time_s, np.inf)))
  assert best_seed >= dp.best_by_family_s["split"] * (1 - 1e-5)  # the DP sees finer splits too
  # The search never ends above the seeds it started from.
  res = search.optimize(search_job, cluster_2x8, families=("split",), starts=4, steps=20,
                        space=compact_space)
  assert res.best_step_time_s <= best_seed * (1 + 1e-6)
  lean_only = evaluate.Evaluator(fs)
  with pytest.raises(ValueError, match="full=True"):
    cut_dp.family_seeds(fs, lean_only)
