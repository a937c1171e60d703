"""A family that holds no valid plan of a job on a cluster is skipped, saying
why, by every search method and by the bound; the other families are searched.

The case: GRPO with 128 prompts x 8 samples (a 1,024-sample batch) on 6 GPUs.
The colocated family trains on all 6 GPUs, 6 = dp x tp x pp x cp with the
model-parallel product a power of two, so dp is 3 or 6, and neither divides
1,024: no training layout exists. The split family trains on a pool of 1, 2
or 4 GPUs and generates on the rest.
"""

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import space as space_lib

WHY = "colocated: no training layout of 6 GPUs divides the 1,024-sample batch"


@pytest.fixture(scope="module")
def six(h100) -> cm.Cluster:
  return cm.Cluster(h100, gpus_per_node=6, nodes=1)


@pytest.mark.parametrize("nodes,empty", [(1, False), (2, False), (3, True), (4, False),
                                         (5, True), (6, True), (7, True), (8, False),
                                         (12, True), (16, False)])
def test_colocated_is_empty_where_no_data_parallel_degree_divides_the_batch(h100, nodes, empty):
  # 8 GPUs a node: 8n = dp x 2^k with dp | 4,096 exactly when n is a power of two.
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"))
  why = space_lib.why_empty("colocated", job, cm.Cluster(h100, gpus_per_node=8, nodes=nodes))
  assert (why is not None) == empty
  if empty:
    assert why == (f"colocated: no training layout of {8 * nodes} GPUs divides the "
                   "4,096-sample batch")
  assert space_lib.why_empty("split", job, cm.Cluster(h100, gpus_per_node=8,
                                                      nodes=nodes)) is None


def test_why_empty_names_the_mini_batch_and_the_missing_role(h100):
  # Two mini-batches of 512 samples: 24 GPUs hold dp 3, 6, 12 or 24, none divides 512.
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=128.0, mini_batches=2)
  cluster = cm.Cluster(h100, gpus_per_node=8, nodes=3)
  assert space_lib.why_empty("colocated", job, cluster) == (
      "colocated: no training layout of 24 GPUs divides the 512-sample mini-batch")
  assert space_lib.why_empty("split3", job, cluster) == (
      "split3: algorithm 'grpo' has no critic to place")
  one = cm.Cluster(h100, gpus_per_node=1, nodes=1)
  assert space_lib.why_empty("split", job, one) == (
      "split: its 2 pools need 2 GPUs, the cluster has 1")
  assert search.framework("any").build("colocated", job, cluster) is None


def test_a_split_training_pool_with_no_size_is_named(h100):
  # 3 samples a step: a training pool's dp must divide 3; on 2 GPUs (one each)
  # the training pool of 1 GPU has dp 1, so it holds; with 6 samples and whole
  # nodes of 3 GPUs (NeMo-RL's rule) a 3-GPU training pool has dp 3 | 6.
  job = cm.RLJob("grpo", cm.models.get("qwen3-0.6b"), prompts_per_step=1.0,
                 samples_per_prompt=3.0)
  assert space_lib.why_empty("split", job, cm.Cluster(h100, gpus_per_node=2, nodes=1)) is None
  # 6 GPUs on 2 nodes of 3, whole nodes: the training pool holds 3 GPUs (dp 3 | 3).
  assert space_lib.why_empty("split", job, cm.Cluster(h100, gpus_per_node=3, nodes=2),
                             nodes="whole") is None
  # 2 samples on whole nodes of 3 GPUs: dp 3 does not divide 2.
  job2 = job.replace(samples_per_prompt=2.0)
  assert space_lib.why_empty("split", job2, cm.Cluster(h100, gpus_per_node=3, nodes=2),
                             nodes="whole") == (
      "split: no training layout for its train pool (up to 5 GPUs, whole nodes) divides the "
      "2-sample batch")


def test_optimize_skips_the_empty_family_and_searches_the_other(search_job, six, compact_space):
  res = search.optimize(search_job, six, families=("colocated", "split"), starts=2, steps=5,
                        space=compact_space, relaxed="off", top_k=2)
  assert res.skipped == {"colocated": WHY}
  assert res.feasible and res.family == "split"
  assert set(res.best_by_family_s) == {"split"}
  assert sum(float(p.gpus) for p in res.best_plan.pools) <= 6


def test_optimize_on_empty_families_only_says_why(search_job, six):
  res = search.optimize(search_job, six, families=("colocated",))
  assert not res.feasible and res.skipped == {"colocated": WHY}
  assert res.infeasible_reason == "no family holds a plan: " + WHY
  assert res.evaluations == 0


def test_cut_dp_skips_the_empty_family(search_job, six, compact_space):
  res = search.cut_dp(search_job, six, families=("colocated",), space=compact_space)
  assert not res.feasible and res.skipped == {"colocated": WHY}
  assert res.infeasible_reason == "no family holds a plan: " + WHY


@pytest.mark.parametrize("method", ["random", "annealing", "enumerate"])
def test_baselines_return_the_reason_on_an_empty_family(search_job, six, compact_space, method):
  kw = dict(space=compact_space)
  res = {"random": lambda: search.random_search(search_job, six, "colocated", 1.0, **kw),
         "annealing": lambda: search.simulated_annealing(search_job, six, "colocated", 1.0,
                                                         **kw),
         "enumerate": lambda: search.enumerate_plans(search_job, six, "colocated", **kw)}[method]()
  assert res.method == method and not res.feasible
  assert res.infeasible_reason == WHY and res.skipped == {"colocated": WHY}
  assert res.evaluations == 0
  assert search.space_size(search_job, six, "colocated", space=compact_space) == 0


def test_lower_bound_of_an_empty_family_is_inf_and_says_why(search_job, six, compact_space):
  b = search.lower_bound(search_job, six, "colocated", space=compact_space)
  assert b.bound_s == np.inf and b.empty == WHY and b.rows == 0


def test_rules_of_thumb_say_why_the_colocated_rule_has_no_plan(search_job, six):
  rules = {r.method: r for r in search.rules_of_thumb(search_job, six)}
  assert not rules["verl"].feasible and rules["verl"].infeasible_reason == WHY
  assert rules["openrlhf"].feasible and rules["openrlhf"].family == "split"
