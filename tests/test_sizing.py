"""Sizing the cluster by cost: the Pareto front, the cheapest plan meeting a
target, the fastest within a budget. Prices are test inputs."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import sizing

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "prices.yaml")


def _opt(gpu, nodes, price, step):
  gpus = 8 * nodes
  per_step = price * gpus * step / 3600.0
  return sizing.ClusterOption(gpu, nodes, gpus, price, np.isfinite(step), step,
                              256.0 / step, price * gpus, per_step, per_step / 256.0, None,
                              None, None)


HAND = (_opt("A", 1, 1.0, 400.0), _opt("A", 2, 1.0, 180.0), _opt("A", 4, 1.0, 150.0),
        _opt("B", 1, 3.0, 100.0), _opt("B", 2, 3.0, 60.0), _opt("B", 4, 3.0, 55.0),
        _opt("C", 1, 2.0, float("inf")))


def test_front_of_hand_made_options():
  front = search.pareto(HAND)
  # Costs per step: A1 0.889, A2 0.8, A4 1.333, B1 0.667, B2 0.8, B4 1.467.
  assert [(o.gpu, o.nodes) for o in front] == [("B", 1), ("B", 2), ("B", 4)]
  costs = [o.cost_per_step for o in front]
  steps = [o.step_time_s for o in front]
  assert costs == sorted(costs)
  assert all(b < a for a, b in zip(steps, steps[1:], strict=False))
  # Every option left out is dominated by one on the front.
  for o in HAND:
    if o.feasible and o not in front:
      assert any(f.cost_per_step <= o.cost_per_step and f.step_time_s <= o.step_time_s
                 for f in front)


def test_cheapest_meeting_a_target_and_fastest_within_a_budget():
  res = search.size_cluster(None, options=HAND, target_step_s=160.0, budget_per_hour=30.0)
  assert res.cheapest.step_time_s <= 160.0
  assert (res.cheapest.gpu, res.cheapest.nodes) == ("B", 1)
  assert res.fastest.cost_per_hour <= 30.0
  assert (res.fastest.gpu, res.fastest.nodes) == ("B", 1)
  loose = search.size_cluster(None, options=HAND, budget_per_hour=50.0)
  assert (loose.fastest.gpu, loose.fastest.nodes) == ("B", 2)
  none = search.size_cluster(None, options=HAND, target_step_s=10.0)
  assert none.cheapest is None
  rate = search.size_cluster(None, options=HAND, target_samples_per_s=4.0)
  assert rate.cheapest.samples_per_s >= 4.0 and (rate.cheapest.nodes, rate.cheapest.gpu) == (
      2, "B")


def test_prices_file_and_bad_prices():
  prices = search.load_prices(EXAMPLE)
  assert set(prices) <= set(cm.hardware.names()) and all(v > 0 for v in prices.values())
  with pytest.raises(ValueError, match="H100=0"):
    sizing.check_prices({"H100": 0})
  with pytest.raises(ValueError):
    sizing.check_prices({"TPU-v9": 1.0})
  with pytest.raises(ValueError, match="target_step_s"):
    search.size_cluster(None, options=HAND, target_step_s=-1.0)
  with pytest.raises(ValueError, match="cost"):
    search.pareto(HAND, cost="cost_per_token")


def test_sizing_a_real_job_on_two_types(tmp_path):
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(500.0, 2048.0))
  prices = {"H100": 3.0, "H20": 1.0}
  res = search.size_cluster(job, prices, nodes=(1,), planner=search.layouts_planner,
                            target_step_s=1e4)
  assert len(res.options) == 2 and all(o.feasible for o in res.options)
  for o in res.options:
    assert o.cost_per_step == pytest.approx(
        prices[o.gpu] * 8 * float(o.estimate.step_time_s) / 3600.0)
    assert o.cost_per_sample == pytest.approx(o.cost_per_step / 256.0)
  assert res.cheapest.step_time_s <= 1e4
  assert res.cheapest.cost_per_step == min(o.cost_per_step for o in res.options)
  steps = [o.step_time_s for o in res.front]
  assert all(b < a for a, b in zip(steps, steps[1:], strict=False))
  path = tmp_path / "pareto.png"
  search.plot_pareto(res.options, str(path))
  assert path.stat().st_size > 0


def test_layouts_planner_climbs_the_ladders_it_is_given():
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(500.0, 2048.0))
  prices = {"H100": 3.0}
  for families, pools in ((("colocated",), 1), (("split",), 2)):
    planner = functools.partial(search.layouts_planner, families=families)
    res = search.size_cluster(job, prices, nodes=(2,), planner=planner)
    (only,) = res.options
    assert only.feasible and len(only.plan.pools) == pools, families
  # One node holds no split of whole nodes: the split ladder alone finds nothing.
  one = search.layouts_planner(job, cm.Cluster("H100", 8, 1), families=("split",))
  assert one.best_plan is None and "split ladder fits" in one.infeasible_reason
  for bad in ((), ("split_async",), "colocated"):
    with pytest.raises(ValueError, match=r"layouts_planner: families=.* must be a non-empty "
                                         r"subset of \('colocated', 'split'\)"):
      search.layouts_planner(job, cm.Cluster("H100", 8, 1), families=bad)


def test_sizing_table_has_a_line_per_option_and_marks_the_front():
  res = search.SizingResult(None, None, HAND[:1], HAND)
  lines = res.table().splitlines()
  assert len(lines) == len(HAND) + 1
  marked = [ln for ln in lines[1:] if ln.startswith("* ")]
  assert len(marked) == 1 and marked[0].split()[1:3] == ["A", "1"]
  assert lines[-1].split()[:4] == ["C", "1", "8", "no"]  # infeasible: "no fit"
