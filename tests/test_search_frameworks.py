"""Framework-aware spaces, the user's execution mode and distinct top plans.

The small problem of tests/test_search.py (GRPO on Qwen2.5-1.5B, 16 H100, the
compact space) with few starts and steps.
"""

import numpy as np
import pytest

import costmodel as cm
import export
import search
from search._src import compile_cache
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import valid_space


def test_pool_sizes_follow_the_rules(search_job, cluster_2x8):
  # 1,024 samples: a training pool is dp x 2^k with dp dividing 1,024 (a power of
  # two); the rollout pool any count up to the 15 GPUs the other pool leaves.
  fs = space_lib.build("split", search_job, cluster_2x8)
  np.testing.assert_array_equal(fs.var("pool.gen").options, np.arange(1.0, 16.0))
  np.testing.assert_array_equal(fs.var("pool.train").options, [1.0, 2.0, 4.0, 8.0])
  # 96 samples (3 x 32): 6, 12 and 3 train too, 5 and 10 do not.
  odd = search_job.replace(prompts_per_step=12.0)
  train = space_lib.build("split", odd, cluster_2x8).var("pool.train").options
  assert {3.0, 6.0, 12.0} <= set(train) and not {5.0, 10.0} & set(train)
  # Ray groups of nnodes x n_gpus_per_node: 15 GPUs on 2 nodes of 8 are not uniform.
  uniform = space_lib.pool_sizes(cluster_2x8, "uniform")
  assert 14.0 in uniform and 15.0 not in uniform and 7.0 in uniform
  whole = space_lib.pool_sizes(cluster_2x8, "whole")
  np.testing.assert_array_equal(whole, [8.0, 16.0])


def test_batch_rule_drops_layouts_whose_dp_does_not_divide_the_batch(search_job, cluster_2x8,
                                                                     compact_space):
  odd = search_job.replace(prompts_per_step=9.0)  # 72 samples per mini-batch: dp 16 doesn't divide

  def dps(rule_sets):
    fs = space_lib.build("colocated", odd, cluster_2x8, compact_space,
                         rule_sets=rule_sets)
    rows = valid_space.Blocks(fs).sample(np.random.default_rng(0), 400)
    return set(16.0 / (rows[:, fs.index("actor.tp")] * rows[:, fs.index("actor.pp")]
                       * rows[:, fs.index("actor.cp")]))

  assert dps(("zero3", "batch")) == {1.0, 2.0, 4.0, 8.0}
  assert 16.0 in dps(("zero3",))


@pytest.mark.parametrize("name", fw_lib.NAMES[1:])
def test_plans_the_space_admits_export(name, search_job, cluster_2x8, compact_space):
  # Random valid plans of every family the framework runs (any mode) export.
  fw = fw_lib.get(name)
  rng = np.random.default_rng(1)
  for fam in fw_lib.families_for(search_job, name, max_staleness=1, partial_rollout=True):
    fs = fw.build(fam, search_job, cluster_2x8, compact_space)
    rows = valid_space.Blocks(fs).sample(rng, 40)
    assert len(rows), fam
    for row in rows:
      plan = fs.to_plan(row)
      err = fw_lib.export_error(name, plan, search_job, cluster_2x8)
      assert err is None, (fam, err)


def test_ties_give_the_critic_the_actors_settings(cluster_2x8, compact_space):
  ppo = cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0)
  fs = fw_lib.get("openrlhf").build("split_async", ppo, cluster_2x8, compact_space)
  assert fs.index("critic.tp") == fs.index("actor.tp")
  assert len(fs.var("critic.tp").options) > 1  # the actor's options
  rows = valid_space.Blocks(fs).sample(np.random.default_rng(2), 20)
  for row in rows:
    plan = fs.to_plan(row)
    actor, critic = (next(r for r in plan.roles if r.role == k).train for k in ("actor", "critic"))
    assert (critic.tp, critic.pp, critic.zero_stage, critic.micro_batch) == (
        actor.tp, actor.pp, actor.zero_stage, actor.micro_batch)
  assert "split" not in fw_lib.families_for(ppo, "openrlhf")  # no sync split with a critic
  assert "split" in fw_lib.families_for(ppo, "any")


@pytest.mark.parametrize("name", fw_lib.NAMES[1:])
def test_searched_best_plan_exports(name, search_job, cluster_2x8, compact_space):
  res = search.optimize(search_job, cluster_2x8, families=["split"], starts=4, steps=10, seed=0,
                        space=compact_space, framework=name, top_k=3)
  assert res.feasible and res.framework == name
  assert name in res.accepted_by
  for plan, _ in res.top:
    opts = fw_lib.export_options(name, plan, search_job, cluster_2x8)
    assert opts is not None
    e = export.get(name)
    text = e.export(e.adapt(plan, **opts), search_job, cluster_2x8, **opts)  # as it runs
    assert text.startswith("#")


def test_a_family_searched_without_its_relaxed_phase_compiles_ranking_for_compile_time(
    search_job, cluster_2x8, compact_space, compiled_programs):
  # The compact space is far below the size that turns the relaxed phase on
  # (``relaxed="auto"``): the discrete phases alone score its few rows, so its
  # ranking program compiles at level 0, as a shared space's does.
  built = compiled_programs
  res = search.optimize(search_job, cluster_2x8, families=["split"], starts=4, steps=10, seed=0,
                        space=compact_space, framework="verl", top_k=3)
  assert res.feasible and not np.isfinite(res.relaxed_bound_s["split"])
  ranking = [options for name, options in built if name == "exact_ranking"]
  assert ranking and all(o == compile_cache.FAST_COMPILE for o in ranking), built


def test_unknown_framework_and_family_outside_the_mode(search_job, cluster_2x8):
  with pytest.raises(ValueError, match=r"framework='megatron' is not one of"):
    search.optimize(search_job, cluster_2x8, framework="megatron")
  with pytest.raises(ValueError, match=r"family='split_async' is outside the space"):
    search.optimize(search_job, cluster_2x8, families=["split_async"])
  with pytest.raises(ValueError, match=r"partial_rollout=True needs max_staleness >= 1"):
    search.optimize(search_job, cluster_2x8, partial_rollout=True)


def test_modes_gate_the_families(search_job):
  assert fw_lib.families_for(search_job, "any") == ("colocated", "split")
  assert fw_lib.families_for(search_job, "any", 1) == ("colocated", "split", "split_async")
  assert fw_lib.families_for(search_job, "any", 1, True)[-1] == "split_async_partial"
  assert fw_lib.families_for(search_job, "areal", 1, True) == ("split", "split_async_partial")
  assert search.default_families(search_job) == fw_lib.families_for(search_job, "any", 1, True)


@pytest.fixture(scope="module")
def off_policy(search_job, cluster_2x8, compact_space):
  return search.optimize(search_job, cluster_2x8, families=["split", "split_async"], starts=16,
                         steps=60, seed=0, space=compact_space, max_staleness=1)


def test_default_search_is_on_policy(split_search):
  assert split_search.on_policy is None
  assert set(split_search.top_families) == {"split"}
  assert all(p.mode.staleness == 0 for p, _ in split_search.top)
  assert split_search.compile_time_s <= split_search.wall_time_s
  assert split_search.search_time_s == pytest.approx(
      split_search.wall_time_s - split_search.compile_time_s)


def test_staleness_allows_async_and_reports_the_on_policy_best(off_policy, split_search):
  assert "split_async" in off_policy.history
  sync = off_policy.on_policy
  assert sync is not None and sync.feasible and sync.family == "split"
  assert sync.best_plan.mode.staleness == 0
  # The same split family and seed: the on-policy best is the on-policy search's.
  assert sync.best_step_time_s == pytest.approx(split_search.best_step_time_s, rel=1e-6)
  assert off_policy.best_step_time_s <= sync.best_step_time_s * (1 + 1e-6)
  assert any(p.mode.staleness == 1 for p, _ in off_policy.top)


def test_rules_of_thumb_keep_the_users_mode(search_job, cluster_2x8):
  names = [r.method for r in search.rules_of_thumb(search_job, cluster_2x8)]
  assert "areal" not in names and {"verl", "openrlhf", "kv_fit"} <= set(names)
  names = [r.method for r in search.rules_of_thumb(search_job, cluster_2x8, max_staleness=1,
                                                    partial_rollout=True)]
  assert "areal" in names


def test_top_plans_differ_in_placement_or_degree(off_policy):
  keys = [result_lib.layout_key(p, f) for (p, _), f in
          zip(off_policy.top, off_policy.top_families, strict=True)]
  assert len(set(keys)) == len(keys) > 1
  best, fam = off_policy.best_plan, off_policy.family
  for (plan, _), f in zip(off_policy.top[1:], off_policy.top_families[1:], strict=True):
    diff = result_lib.differences(plan, f, best, fam)
    assert diff != "same layout"
    assert any(w in diff for w in ("family", "pool", " tp ", " pp ", " cp ", " ep "))


def test_differences_name_what_changed(search_job, cluster_2x8):
  a = cm.build_plan("split", search_job, {"gen": 8.0, "train": 8.0})
  b = cm.build_plan("split", search_job, {"gen": 6.0, "train": 8.0},
                    train={"actor": cm.Parallel(tp=2.0)})
  assert result_lib.differences(b, "split", a, "split") == (
      "pool gen 8->6, actor tp 1->2, reference tp 1->2")
  assert result_lib.differences(a, "split", a, "split") == "same layout"
  assert result_lib.layout_key(a, "split") != result_lib.layout_key(b, "split")


def test_searched_plans_are_estimated_as_the_framework_runs_them(search_job, cluster_2x8,
                                                                  compact_space):
  # NeMo-RL refits colocated engines over CUDA IPC and swaps the policy's state to the
  # host around generation: the plans returned carry that, and so do their estimates.
  res = search.optimize(search_job, cluster_2x8, families=["colocated"], starts=4, steps=10,
                        seed=0, space=compact_space, framework="nemo_rl", top_k=2)
  assert res.feasible and res.top
  steps = [float(est.step_time_s) for _, est in res.top]
  assert steps == sorted(steps)
  for plan, est in res.top:
    assert plan.engine.sync_backend == "ipc"
    assert plan.role("actor").train.swap == 1.0
    assert export.get("nemo_rl").adapt(plan) == plan  # already as NeMo-RL runs it
    assert float(est.step_time_s) == pytest.approx(
        float(cm.estimate(search_job, plan, cluster_2x8).step_time_s), rel=1e-5)
