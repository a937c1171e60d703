"""Placement families as data, and the one ranking every search method uses."""

import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
import search
from search._src import result as result_lib


@pytest.fixture(scope="module")
def cluster():
  return cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)


@pytest.fixture(scope="module")
def ppo():
  return cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                  samples_per_prompt=4.0, reward_model=cm.models.get("qwen2.5-1.5b"))


@pytest.fixture(scope="module")
def grpo():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                  samples_per_prompt=4.0)


_SIZES = {"colocated": {"all": 16.0}, "split": {"gen": 8.0, "train": 8.0},
          "split_async": {"gen": 4.0, "train": 12.0},
          "split_async_partial": {"gen": 12.0, "train": 4.0},
          "split3": {"gen": 8.0, "actor": 4.0, "critic": 4.0}}


def test_registry_holds_the_families_and_search_reads_it(ppo, grpo):
  names = tuple(p.name for p in cm.placements())
  assert names == ("colocated", "split", "split_async", "split_async_partial", "split3")
  assert search.FAMILIES == names
  assert search.default_families(ppo) == names
  assert search.default_families(grpo) == names[:-1]
  assert tuple(p.name for p in cm.placements(grpo)) == names[:-1]


@pytest.mark.parametrize("name", list(_SIZES))
def test_every_placement_builds_a_valid_plan(name, ppo, cluster):
  place = cm.placement(name)
  train = {"actor": cm.Parallel(tp=2.0), "critic": cm.Parallel(tp=1.0, pp=2.0)}
  infer = {"reference": cm.Parallel(tp=2.0), "reward": cm.Parallel(pp=2.0)}
  plan = cm.build_plan(name, ppo, _SIZES[name], cm.Engine(tp=2.0), train=train, infer=infer)
  cm.validate_plan(ppo, plan, cluster)
  assert plan.pool_names == place.pools
  assert {p.name: float(p.gpus) for p in plan.pools} == _SIZES[name]
  assert plan.rollout_pool == place.rollout_pool
  assert plan.mode == place.mode and place.allows(plan.mode)
  assert [r.role for r in plan.roles] == list(cmi.required_roles(ppo))
  for r in plan.roles:
    assert r.pool == place.pool_of(r.role)
  assert plan.role("critic").train == cm.Parallel(tp=1.0, pp=2.0)
  assert plan.role("actor").infer is None  # runs its training layout
  assert plan.role("reference").train is None
  assert plan.role("reward").infer_layout == cm.Parallel(pp=2.0)
  assert np.isfinite(float(cm.estimate(ppo, plan, cluster).step_time_s))


def test_families_differ_in_pools_and_modes():
  split3 = cm.placement("split3")
  assert [split3.pool_of(r) for r in ("actor", "reference", "critic", "reward")] == [
      "actor", "actor", "critic", "critic"]
  assert split3.requires == ("critic",)
  assert cm.placement("split_async").mode == cm.Mode(staleness=1)
  assert cm.placement("split_async_partial").mode == cm.Mode(staleness=1, partial_rollout=True)
  assert not cm.placement("colocated").allows(cm.Mode(staleness=1))
  assert not cm.placement("split_async").allows(cm.Mode())
  # The fusion flags do not tell modes apart.
  assert cm.placement("colocated").allows(cm.Mode(fuse_inference=True))


def test_build_plan_fills_layouts_as_the_constructors_do(ppo, cluster):
  train = cm.Parallel(tp=2.0)
  plan = cm.build_plan("split3", ppo, _SIZES["split3"], train={"actor": train})
  cm.validate_plan(ppo, plan, cluster)
  assert plan.role("critic").train == train and plan.role("critic").infer is None
  assert plan.role("reference").infer == train and plan.role("reward").infer == train
  # The default engine's memory fraction is resolved by the placement: 0.9
  # on split3's rollout pool, which no role shares.
  assert plan.engine == cm.Engine(memory_fraction=0.9) and plan.mode == cm.Mode()
  infer = cm.Parallel(pp=2.0)
  plan = cm.build_plan("colocated", ppo, {"all": 16.0}, infer={"actor": infer},
                       mode=cm.Mode(fuse_training=True))
  assert plan.role("actor").train == cm.Parallel() and plan.role("actor").infer == infer
  assert plan.role("reward").infer == infer and plan.mode.fuse_training


def test_placement_that_does_not_apply_is_refused(grpo):
  assert not cm.placement("split3").applies_to(grpo)
  with pytest.raises(ValueError, match=r"placement='split3' needs a critic role; "
                                       r"algorithm='grpo'"):
    cm.build_plan("split3", grpo, _SIZES["split3"])


def test_unknown_placement_and_wrong_pools_are_refused(grpo):
  with pytest.raises(ValueError, match=r"placement='hybrid' is not one of \('colocated'"):
    cm.placement("hybrid")
  with pytest.raises(ValueError, match=r"placement='split': pool_gpus names \['all'\], must "
                                       r"name its pools \['gen', 'train'\]"):
    cm.build_plan("split", grpo, {"all": 16.0})


def test_a_placement_record_is_checked():
  roles = (("actor", "a"), ("reference", "a"), ("critic", "a"), ("reward", "a"))
  with pytest.raises(ValueError, match=r"role 'actor' on pool='a', not one of \('b',\)"):
    cm.Placement("bad", ("b",), roles, "b")
  with pytest.raises(ValueError, match=r"rollout_pool='c' is not one of \('a',\)"):
    cm.Placement("bad", ("a",), roles, "c")
  with pytest.raises(ValueError, match=r"must place each of"):
    cm.Placement("bad", ("a",), roles[:3], "a")
  custom = cm.Placement("mine", ("a", "b"), roles[:2] + (("critic", "b"), ("reward", "b")), "b",
                        requires=("critic",))
  assert custom.pool_of("critic") == "b" and custom.rollout_pool == "b"


def test_colocated_constructor_is_the_explicit_plan(ppo, cluster):
  train, critic, infer = cm.Parallel(tp=2.0), cm.Parallel(pp=2.0), cm.Parallel(tp=4.0)
  engine, mode = cm.Engine(tp=2.0), cm.Mode(fuse_inference=True)
  got = cm.Plan.colocated(ppo, cluster, train=train, engine=engine, critic=critic, mode=mode)
  want = cm.Plan(
      pools=(cm.Pool("all", 16.0),),
      roles=(cm.RolePlan("actor", "all", train=train, infer=None),
             cm.RolePlan("reference", "all", infer=train),
             cm.RolePlan("critic", "all", train=critic, infer=None),
             cm.RolePlan("reward", "all", infer=train)),
      engine=engine, rollout_pool="all", mode=mode)
  assert got == want
  with_infer = cm.Plan.colocated(ppo, cluster, infer=infer)
  assert with_infer.role("actor").train == cm.Parallel()
  assert [r.infer for r in with_infer.roles] == [infer] * 4
  assert with_infer.role("critic").train == cm.Parallel()


def test_split_constructor_is_the_explicit_plan(grpo, cluster):
  infer = cm.Parallel(tp=2.0)
  got = cm.Plan.split(grpo, cluster, 6, infer=infer, mode=cm.Mode(staleness=2))
  want = cm.Plan(
      pools=(cm.Pool("gen", 6.0), cm.Pool("train", 10.0)),
      roles=(cm.RolePlan("actor", "train", train=cm.Parallel(), infer=infer),
             cm.RolePlan("reference", "train", infer=infer)),
      engine=cm.Engine(), rollout_pool="gen", mode=cm.Mode(staleness=2))
  assert got == want
  assert cm.Plan.split(grpo, cluster, 8).mode == cm.Mode()


def test_ranking_puts_feasible_first_by_step_time_then_memory_excess():
  t = np.array([5.0, 3.0, 1.0, 4.0, np.inf, 2.0, 3.0])
  f = np.array([True, True, False, True, True, False, True])
  x = np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.1, 0.0])
  # Feasible by step time (the tie 1, 6 keeps its order), the one with an
  # infinite step time last of them; then the infeasible by excess.
  assert result_lib.ranking(t, f, x).tolist() == [1, 6, 3, 0, 4, 5, 2]


@pytest.mark.parametrize("k", [1, 5, 21, 300])
def test_ranking_k_is_the_head_of_the_full_ranking_ties_included(k):
  rng = np.random.default_rng(5)
  n = 2000
  t = rng.integers(0, 40, n).astype(float)  # many ties, kept in row order
  t[rng.random(n) < 0.05] = np.inf
  f, x = rng.random(n) < 0.7, rng.integers(0, 5, n) / 4.0
  full = result_lib.ranking(t, f, x)
  np.testing.assert_array_equal(result_lib.ranking(t, f, x, k), full[:k])


def test_rank_merges_and_keeps_each_plan_once():
  a = result_lib.Ranked(np.array([[1.0], [2.0]]), np.array([3.0, 1.0]),
                        np.array([True, True]), np.zeros(2))
  b = result_lib.Ranked(np.array([[1.0], [3.0]]), np.array([2.0, 9.0]),
                        np.array([True, False]), np.array([0.0, 0.2]))
  r = result_lib.rank(a, b)
  assert r.values[:, 0].tolist() == [2.0, 1.0, 3.0]
  assert r.step_time_s.tolist() == [1.0, 2.0, 9.0]  # the best copy of plan 1


@pytest.mark.parametrize("keep", [1, 7, 40, 500])
def test_rank_keep_is_the_head_of_the_full_ranking(keep):
  rng = np.random.default_rng(3)
  # 60 distinct plans, most of them many times over with different scores, so
  # the best rows hold few distinct plans and the head must grow to find them.
  plans = rng.integers(0, 4, (60, 3)).astype(float)
  plans = np.unique(plans, axis=0)
  rows = plans[rng.integers(0, len(plans), 3000)]
  parts = [result_lib.Ranked(rows[i::2], rng.random(1500) * 100, rng.random(1500) < 0.8,
                             rng.random(1500)) for i in range(2)]
  full = result_lib.rank(*parts)
  head = result_lib.rank(*parts, keep=keep)
  assert len(full.values) == len(plans)
  assert len(head.values) == min(keep, len(plans))
  for a, b in zip(head, full, strict=True):
    np.testing.assert_array_equal(a, b[:keep])
  with pytest.raises(ValueError, match="keep=0"):
    result_lib.rank(*parts, keep=0)


def test_search_result_without_a_plan():
  res = search.SearchResult(method="random", family="split", infeasible_reason="none fits")
  assert not res.feasible and res.best_step_time_s == float("inf")
  assert res.top == () and res.relaxed_bound_s == {}
