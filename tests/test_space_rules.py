"""The search space's vectorised rules are readings of the rule table: on a grid
they accept what the table accepts and refuse what it refuses."""

import itertools

import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
from search._src import space as space_lib
from search._src import space_options

MODEL = cm.models.get("llama-3.1-8b")  # 32 heads, 8 KV heads: tp up to 8 passes the head rules


def _table_accepts_pool(size: int, mini_batch: float, max_model: int) -> bool:
  """Some tp = 2^k <= max_model gives a training layout on ``size`` GPUs that
  passes the whole layout scope with the ``batch`` set (check_rules, scalar)."""
  for tp in space_options.powers_of_two(max_model):
    fields = cmi.layout_fields(MODEL, float(size), float(tp), 1.0, 1.0, 1.0, zero=1.0,
                               mini_batch_samples=mini_batch, trained=True)
    try:
      cmi.check_rules("layout", fields, rule_sets=("batch",))
    except ValueError:
      continue
    return True
  return False


@pytest.mark.parametrize("mini_batch,max_model", [(64.0, 8), (48.0, 4), (7.0, 1), (12.0, 8)])
def test_training_pool_sizes_agree_with_the_rule_table(mini_batch, max_model):
  sizes = np.arange(1, 97, dtype=np.float64)
  got = space_options.training_pool_sizes(sizes, mini_batch, max_model)
  want = [s for s in sizes if _table_accepts_pool(int(s), mini_batch, max_model)]
  np.testing.assert_array_equal(got, want)
  # by hand: size = dp x 2^k, dp | mini_batch
  by_hand = [s for s in range(1, 97) if any(
      s % m == 0 and mini_batch % (s // m) == 0 for m in space_options.powers_of_two(max_model))]
  np.testing.assert_array_equal(got, by_hand)


def test_training_pool_sizes_refuse_sizes_no_layout_fits():
  # 48 samples over 5, 7 or 10 GPUs: dp 5, 7, 10 (or 5 x 2) never divides 48
  got = space_options.training_pool_sizes(np.asarray([5.0, 7.0, 10.0, 24.0, 96.0]), 48.0, 2)
  np.testing.assert_array_equal(got, [24.0, 96.0])
  for size in (5, 7, 10):
    for tp in (1, 2):
      with pytest.raises(ValueError, match="must divide"):
        cmi.check_rules("layout", cmi.layout_fields(
            MODEL, float(size), float(tp), 1.0, 1.0, 1.0, mini_batch_samples=48.0,
            trained=True), rule_sets=("batch",))


def test_pool_grid_is_the_pools_rule(search_job, cluster_2x8, compact_space):
  fs = space_lib.build("split", search_job, cluster_2x8, compact_space)
  grid = fs.pool_grid()
  block = dict(fs.blocks)["pools"]
  every = fs.option_grid(block)
  kept = {tuple(r) for r in grid}
  assert 0 < len(grid) < len(every)
  for row in every:
    fields = {"total": float(row.sum()), "cluster_gpus": float(cluster_2x8.n_gpus)}
    try:
      cmi.check_rules("pools", fields)
      accepted = True
    except ValueError as e:
      assert "more than the cluster's 16" in str(e)
      accepted = False
    assert (tuple(row) in kept) == accepted


@pytest.mark.parametrize("name,fp8,fp4", [("A100-80GB", False, False), ("H100", True, False),
                                          ("B200", True, True), ("GB300", True, True)])
def test_one_reading_of_an_absent_format(name, fp8, fp4):
  hw = cm.hardware.get(name)
  assert cmi.precision_available(hw, "bf16")
  assert cmi.precision_available(hw, "fp8") is fp8
  assert cmi.precision_available(hw, "fp4") is fp4
  assert space_options.has_fp8(hw) is fp8


def test_precision_available_refuses_an_unknown_format():
  with pytest.raises(ValueError, match="compute='int4' is not one of"):
    cmi.precision_available(cm.hardware.get("H100"), "int4")


@pytest.mark.parametrize("critic,reward", list(itertools.product((False, True), repeat=2)))
def test_stage_owners_follow_the_stage_graph(critic, reward):
  job = cm.RLJob("ppo" if critic else "grpo", MODEL, prompts_per_step=32.0,
                 samples_per_prompt=4.0, reward_model=MODEL if reward else None)
  owners = cmi.stage_owners(job)
  want = {"generate": "engine", "reward": "reward" if reward else None,
          "reference": "reference", "old_log_prob": "actor", "actor_update": "actor",
          "weight_sync": None}
  if critic:
    want |= {"values": "critic", "critic_update": "critic"}
  assert owners == {k: v for k, v in want.items() if k in owners}
  assert set(owners) == set(want) - (set() if job.use_reference else {"reference"})
