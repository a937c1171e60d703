"""Relaxed cluster sizing: pool sizes and GPU types by gradient, checked against
the enumeration on clusters small enough to enumerate exhaustively.

Prices are test inputs (a fast type at 3 per GPU-hour, a cheap one at 1). Every
problem here has the same job structure and 24 GPUs of layout options, so the
relaxed programs compile once per family. The generation-bound job is the one
``notebooks/05_beyond.ipynb`` sizes (the default 16 length bins), and the
notebook runs on this module's pytest-xdist worker (group ``sizing``), so it
finds these programs in the worker's compilation cache.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
import search
from search._src import compile_cache
from search._src import mixed
from search._src import sizing_relax
from search._src import sizing_search

PRICES = {"H800": 3.0, "H20": 1.0}
GROUPS = {"H800": 1, "H20": 2}
ASYNC = (cm.Mode(staleness=1),)
RELAX = dict(modes=ASYNC, starts=8, steps=100, seed=0)
pytestmark = pytest.mark.xdist_group("sizing")


def _job(prompt, mean, longest):
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=128.0,
                  samples_per_prompt=8.0, prompt_len=prompt,
                  response=cm.ResponseLength.from_mean_max(mean, longest))


GEN_BOUND = _job(256.0, 3000.0, 12000.0)


@pytest.fixture(scope="module")
def mixed_pair():
  enum = search.mixed_cluster(GEN_BOUND, GROUPS, PRICES, modes=ASYNC)
  relaxed = search.relaxed_sizing(GEN_BOUND, PRICES, groups=GROUPS, share_type=False, **RELAX)
  return enum, relaxed


@pytest.fixture(scope="module")
def enumerated_sizes():
  planner = functools.partial(search.layouts_planner, modes=ASYNC)
  return search._src.sizing.evaluate_clusters(GEN_BOUND, PRICES, nodes=(1, 2, 3),
                                              planner=planner)


def test_mixed_types_match_the_enumerated_optimum(mixed_pair):
  enum, relaxed = mixed_pair
  best = relaxed.best
  assert best is not None and enum.best is not None
  assert best.cost_per_step <= 1.01 * enum.best.cost_per_step
  # The search put the rollout on the cheap type and training on the fast one.
  assert (best.gen_gpu, best.train_gpu) == ("H20", "H800")
  assert {p.name: p.accelerator.name for p in best.plan.pools} == {"gen": "H20", "train": "H800"}
  assert best.cost_per_hour == pytest.approx(8 * (best.gen_nodes * 1.0 + best.train_nodes * 3.0))
  # Fewer assignments scored exactly than the enumeration's.
  assert relaxed.assignments <= len(enum.options)


def test_a_training_bound_job_stays_on_one_type():
  job = _job(4096.0, 64.0, 256.0)
  enum = search.mixed_cluster(job, GROUPS, PRICES, modes=ASYNC)
  relaxed = search.relaxed_sizing(job, PRICES, groups=GROUPS, share_type=False, **RELAX)
  assert relaxed.best.cost_per_step <= 1.01 * enum.best.cost_per_step
  # As the enumeration finds: one H800 node, every role colocated.
  assert relaxed.best.colocated and relaxed.best.gen_gpu == "H800"


def test_the_gradient_chooses_the_rollout_type(mixed_pair):
  _, relaxed = mixed_pair
  values = relaxed.relaxed["split_async"]
  fs = sizing_relax.build("split_async", GEN_BOUND, tuple(GROUPS), [8, 16], 8, False)
  gen = fs.type_probabilities(values, False)["gen"]
  # Starts begin with random logits; after the relaxed phase most put the
  # rollout pool on H20 with high probability.
  assert np.mean(gen[:, fs.types.index("H20")] > 0.9) >= 0.5
  gpus = values[:, fs.base.index("pool.gen")]
  assert np.all((gpus >= 8 - 1e-3) & (gpus <= 16 + 1e-3))


def test_one_type_cheapest_meeting_a_target_matches_enumeration(enumerated_sizes):
  target = 200.0
  enum = search.size_cluster(GEN_BOUND, options=enumerated_sizes, target_step_s=target)
  relaxed = search.relaxed_sizing(GEN_BOUND, PRICES, nodes=3, target_step_s=target, **RELAX)
  assert enum.cheapest is not None and relaxed.best is not None
  assert relaxed.best.step_time_s <= target
  assert relaxed.best.cost_per_step <= 1.01 * enum.cheapest.cost_per_step
  assert all(o.gen_gpu == o.train_gpu for o in relaxed.options)
  rate = float(GEN_BOUND.samples_per_step) / target
  by_rate = search.relaxed_sizing(GEN_BOUND, PRICES, nodes=3, target_samples_per_s=rate,
                                  **RELAX)
  assert by_rate.best.cost_per_step == pytest.approx(relaxed.best.cost_per_step, rel=1e-6)


def test_fastest_within_a_budget_matches_enumeration(enumerated_sizes):
  budget = 40.0
  enum = search.size_cluster(GEN_BOUND, options=enumerated_sizes, budget_per_hour=budget)
  relaxed = search.relaxed_sizing(GEN_BOUND, PRICES, nodes=3, goal="fastest",
                                  budget_per_hour=budget, **RELAX)
  assert relaxed.best.cost_per_hour <= budget
  assert relaxed.best.step_time_s <= 1.01 * enum.fastest.step_time_s


def test_relaxed_front_is_monotone():
  pairs, front = search.relaxed_front(GEN_BOUND, PRICES, (500.0, 200.0, 100.0), nodes=3, **RELAX)
  targets = [t for t, _ in pairs]
  assert targets == [500.0, 200.0, 100.0]
  bests = [r.best for _, r in pairs]
  assert all(b is not None for b in bests)
  for t, b in zip(targets, bests, strict=True):
    assert b.step_time_s <= t
  costs = [b.cost_per_step for b in bests]
  assert all(c2 >= c1 * (1 - 1e-9) for c1, c2 in zip(costs, costs[1:], strict=False))
  steps = [o.step_time_s for o in front]
  assert all(b < a for a, b in zip(steps, steps[1:], strict=False))


def test_objective_gradient_is_finite_and_matches_finite_differences():
  fs = sizing_relax.build("split_async", GEN_BOUND, tuple(GROUPS), [8, 16], 8, False)
  problem = sizing_relax.SizingProblem(
      job=GEN_BOUND, hardware=sizing_relax.stack_hardware(fs.types),
      price_per_gpu_hour=np.asarray([3.0, 1.0], np.float32),
      available_gpus=np.asarray([8.0, 16.0], np.float32), target_step_s=np.float32(150.0),
      budget_per_hour=np.float32(0.0), cheapest=np.float32(1.0), share_type=np.float32(0.0))
  x0, _, _ = fs.init_relaxed(np.random.default_rng(1), 1)
  eff = cm.Efficiency()

  def objective(x):
    return fs.relaxed_objective(problem, fs.base.cluster, eff, x, 0.1, 10.0)[0]

  # One program gives the objective and its gradient, compiled as the search's loop is
  # (the options that compile fast).
  value_and_grad = jax.jit(jax.value_and_grad(objective),
                           compiler_options=compile_cache.FAST_COMPILE)
  f = lambda y: value_and_grad(y)[0]
  x = jnp.asarray(x0[0], jnp.float32)
  g = np.asarray(value_and_grad(x)[1])
  assert np.all(np.isfinite(g))
  for name in ("pool.gen", "type.gen.H20", "type.train.H800"):
    j = [v.name for v in fs.vars].index(name)
    h = 1e-2
    fd = (float(f(x.at[j].add(h))) - float(f(x.at[j].add(-h)))) / (2 * h)
    assert g[j] == pytest.approx(fd, rel=0.05, abs=1e-3), name
  # Pool sizes and type logits move the objective (both are optimised).
  assert abs(g[[v.name for v in fs.vars].index("pool.gen")]) > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(goal="slowest"), "goal='slowest'"),
    (dict(nodes=0), "nodes=0 must be a whole node count"),
    (dict(target_step_s=-1.0), "target_step_s=-1.0 must be a finite number > 0"),
    (dict(groups={"B200": 1}), "groups\\['B200'\\] has no price"),
    (dict(groups={"H20": 0}), "groups\\['H20'\\]=0 must be a whole node count"),
    (dict(type_share=0.0), "type_share=0.0 must lie in"),
    (dict(starts=0), "starts=0 must be an integer"),
    (dict(modes=()), "modes is empty"),
])
def test_bad_input_names_field_value_and_rule(kwargs, match):
  with pytest.raises(ValueError, match=match):
    search.relaxed_sizing(GEN_BOUND, PRICES, **kwargs)


def test_bad_prices_and_targets_of_the_front():
  with pytest.raises(ValueError, match="H20=-1"):
    search.relaxed_sizing(GEN_BOUND, {"H20": -1.0})
  with pytest.raises(ValueError, match="targets_s"):
    search.relaxed_front(GEN_BOUND, PRICES, (100.0, 0.0))


def test_options_convert_for_the_table():
  inf = float("inf")
  split = mixed.MixedOption("H20", 2, "H800", 1, 40.0, inf, inf, None, None)
  row = sizing_search.as_cluster_option(split, GEN_BOUND)
  assert (row.gpu, row.nodes, row.feasible, row.cost_per_hour) == ("H20+H800 2+1", 3, False, 40.0)
  colocated = mixed.MixedOption("H20", 2, "H20", 0, 16.0, inf, inf, None, None)
  assert sizing_search.as_cluster_option(colocated, GEN_BOUND).gpu == "H20"
  assert search.pareto([row]) == ()
