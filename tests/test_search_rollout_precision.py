"""The rollout engine's format (BF16, or FP8 weights and KV cache) as an opt-in search
option: BF16 alone unless the user allows FP8, FP8 only on accelerators with an FP8
peak and frameworks that write it, each format a space of its own."""

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import frameworks as fw_lib
from search._src import space as space_lib
from search._src.space_options import ROLLOUT_PRECISIONS

FP8 = cm.Precision(weights="fp8", compute="fp8", kv="fp8")
BOTH = ("bf16", "fp8")


def _job():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=64.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(3000.0, 8192.0))


def test_options_default_to_bf16_and_are_checked():
  assert search.SpaceOptions().rollout_precision == ("bf16",)
  assert search.SpaceOptions(rollout_precision=("fp8", "bf16")).rollout_precision == BOTH
  assert ROLLOUT_PRECISIONS["fp8"] == FP8
  with pytest.raises(ValueError, match=r"rollout_precision=\('int4',\) must be a non-empty "
                     r"subset of \('bf16', 'fp8'\)"):
    search.SpaceOptions(rollout_precision=("int4",))
  with pytest.raises(ValueError, match="rollout_precision"):
    search.SpaceOptions(rollout_precision=())


def test_an_fp8_space_builds_fp8_engines_and_needs_an_fp8_peak(cluster_2x8):
  fs = space_lib.build("split", _job(), cluster_2x8, rollout_precision="fp8")
  assert fs.structure.rollout_precision == "fp8"
  row = np.asarray([v.options[0] for v in fs.vars], np.float64)
  plan = fs.to_plan(row)
  assert plan.engine.precision == FP8
  bf16 = space_lib.build("split", _job(), cluster_2x8)
  assert bf16.to_plan(row).engine.precision == cm.Precision()
  assert bf16.structure != fs.structure  # a program of its own
  a100 = cm.Cluster(cm.hardware.get("A100-80GB"), gpus_per_node=8, nodes=2)
  with pytest.raises(ValueError, match="rollout_precision='fp8' needs an FP8 peak; A100"):
    space_lib.build("split", _job(), a100, rollout_precision="fp8")
  with pytest.raises(ValueError, match="rollout_precision='fp4'"):
    space_lib.build("split", _job(), cluster_2x8, rollout_precision="fp4")


def test_fp8_rollout_is_searched_only_where_allowed_and_written(cluster_2x8):
  allow = search.SpaceOptions(rollout_precision=BOTH)
  assert fw_lib.get("any").rollout_precisions(allow, cluster_2x8) == BOTH
  assert fw_lib.get("any").rollout_precisions(None, cluster_2x8) == ("bf16",)
  a100 = cm.Cluster(cm.hardware.get("A100-80GB"), gpus_per_node=8, nodes=2)
  assert fw_lib.get("any").rollout_precisions(allow, a100) == ("bf16",)
  for name in ("verl", "openrlhf", "nemo_rl", "slime", "areal"):  # no quantised checkpoint
    assert fw_lib.get(name).rollout_precisions(allow, cluster_2x8) == ("bf16",), name


def test_search_takes_fp8_rollout_when_allowed_on_a_decode_bound_job(cluster_2x8):
  job = _job()
  res = search.optimize(job, cluster_2x8, families=["colocated"], starts=8, steps=30, seed=0,
                        space=search.SpaceOptions.compact(), top_k=3, rollout_precision=BOTH)
  assert res.feasible
  assert set(res.best_by_family_s) == {"colocated", "colocated+fp8"}
  # FP8 halves the weight and KV bytes every decode step reads.
  assert res.best_by_family_s["colocated+fp8"] < 0.95 * res.best_by_family_s["colocated"]
  assert res.best_plan.engine.precision == FP8 and res.family == "colocated"
  assert float(res.best_estimate.step_time_s) == pytest.approx(
      float(cm.estimate(job, res.best_plan, cluster_2x8).step_time_s), rel=1e-5)
  assert all(p.engine.precision in (FP8, cm.Precision()) for p, _ in res.top)
