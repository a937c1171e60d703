"""Every registered search method keeps the same promises (one suite, run over
``search.METHODS``: a method added to the registry is tested here as it is).

The problem is small: GRPO on Qwen2.5-1.5B on two nodes of eight H100, the
compact space, the ``colocated`` family; methods that run until stopped get a
budget in evaluations (deterministic), the others run to the end.
"""

import numpy as np
import pytest

import costmodel as cm
import search

METHODS = sorted(search.METHODS)
# A budget in evaluations for the methods that never finish by themselves.
EVALUATIONS = 3 * 4096


def _run(name, job, cluster, space, **kw):
  kw.setdefault("families", ("colocated",))
  if search.method(name).anytime and "budget_s" not in kw:
    kw.setdefault("max_evaluations", EVALUATIONS)
  return search.run(name, job, cluster, space=space, **kw)


def _signature(res):
  """What two equal results share: each top plan's layout and step time, and
  each family's bound."""
  return ([(tuple((p.name, float(p.gpus)) for p in plan.pools), float(est.step_time_s))
           for plan, est in res.top], {f: b.bound_s for f, b in res.bounds.items()})


@pytest.fixture(scope="module")
def full(search_job, cluster_2x8, compact_space):
  """Each method's result run to its end (or its budget in evaluations)."""
  return {name: _run(name, search_job, cluster_2x8, compact_space) for name in METHODS}


def test_every_registered_method_builds_a_method_of_its_name():
  assert {"optimize", "random", "annealing", "enumerate"} <= set(METHODS)
  for name in METHODS:
    m = search.method(name)
    assert isinstance(m, search.Method) and m.name == name


@pytest.mark.parametrize("name", METHODS)
def test_plans_are_valid_feasible_and_ranked(name, full, search_job, cluster_2x8):
  res = full[name]
  if not search.method(name).plans:  # a floor per family: no method's plan beats it
    assert res.method == name and not res.feasible and res.infeasible_reason is None
    floor = res.bounds["colocated"].bound_s
    assert 0 < floor <= min(r.best_step_time_s for r in full.values()) * (1 + 1e-6)
    return
  assert res.method == name and res.feasible and res.stopped is None
  assert res.evaluations > 0 and 1 <= len(res.top) <= 5
  times = [float(est.step_time_s) for _, est in res.top]
  assert times == sorted(times) and times[0] == res.best_step_time_s
  for plan, est in res.top:
    cm.validate_plan(search_job, plan, cluster_2x8)
    assert bool(est.feasible)
  assert set(res.top_families) == {"colocated"}


@pytest.mark.parametrize("name", METHODS)
def test_the_same_seed_gives_the_same_result(name, full, search_job, cluster_2x8,
                                             compact_space):
  again = _run(name, search_job, cluster_2x8, compact_space)
  assert _signature(again) == _signature(full[name])
  assert again.evaluations == full[name].evaluations


@pytest.mark.parametrize("name", METHODS)
def test_a_spent_budget_stops_early_never_better_than_the_whole_run(
    name, full, search_job, cluster_2x8, compact_space):
  # No seconds at all: the run stops at the first step after which the method
  # holds plans (its starts), and returns them, valid, or why there are none.
  early = _run(name, search_job, cluster_2x8, compact_space, budget_s=0.0)
  if early.stopped is None:  # it finished within the step it had to take: nothing to stop
    assert early.evaluations == full[name].evaluations
  else:
    assert early.stopped == "budget_s=0 spent"
    assert early.evaluations < full[name].evaluations
  if early.feasible:
    for plan, _ in early.top:
      cm.validate_plan(search_job, plan, cluster_2x8)
    # The whole run starts from these plans: it is never worse.
    assert full[name].best_step_time_s <= early.best_step_time_s * (1 + 1e-6)
  else:
    assert "budget_s=0 spent" in early.infeasible_reason


@pytest.mark.parametrize("name", METHODS)
def test_an_empty_space_is_answered_with_its_reason(name, search_job, h100, compact_space):
  # One GPU cannot hold a rollout pool and a training pool apart.
  one_gpu = cm.Cluster(h100, gpus_per_node=1, nodes=1)
  res = _run(name, search_job, one_gpu, compact_space, families=("split",))
  assert not res.feasible and res.best_plan is None and res.top == ()
  assert set(res.skipped) == {"split"}
  assert res.infeasible_reason.startswith("no family holds a plan: split")


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("kw, match", [
    (dict(budget_s=-1.0), r"budget_s=-1.0 must be None or a number of seconds >= 0"),
    (dict(budget_s=float("nan")), r"budget_s=nan"),
    (dict(families=("splitt",)), r"family='splitt' is not one of"),
    (dict(families=()), r"families=\(\) is empty"),
    (dict(top_k=0), r"top_k=0 must be an integer >= 1"),
    (dict(seed=-1), r"seed=-1 must be an integer >= 0"),
    (dict(max_evaluations=0), r"max_evaluations=0 must be an integer >= 1"),
])
def test_bad_input_is_refused_by_name(name, kw, match, search_job, cluster_2x8):
  with pytest.raises(ValueError, match=match):
    search.run(name, search_job, cluster_2x8, **kw)


def test_an_unknown_method_or_a_method_that_never_ends_without_a_budget_is_refused(
    search_job, cluster_2x8):
  with pytest.raises(ValueError, match=r"method='gradient-descent' is not one of"):
    search.run("gradient-descent", search_job, cluster_2x8)
  with pytest.raises(ValueError, match=r"method=3 is not one of"):
    search.run(3, search_job, cluster_2x8)
  anytime = [n for n in METHODS if search.method(n).anytime]
  assert anytime  # random search at least
  for name in anytime:
    with pytest.raises(ValueError, match=rf"method='{name}' runs until it is stopped; give "
                       "budget_s or max_evaluations"):
      search.run(name, search_job, cluster_2x8)
  with pytest.raises(TypeError, match="run: job must be RLJob"):
    search.run("optimize", "grpo", cluster_2x8)


def test_a_method_object_runs_with_its_own_settings(search_job, cluster_2x8, compact_space):
  # The last batch is cut to the evaluations left.
  small = search.method("random", tables=False)
  res = search.run(small, search_job, cluster_2x8, families="colocated", space=compact_space,
                   max_evaluations=5000)
  assert res.method == "random" and res.evaluations == 5000
  with pytest.raises(ValueError, match=r"random: batch=0 must be an integer >= 1"):
    search.method("random", batch=0)
  with pytest.raises(ValueError, match=r"options \['batch'\] given with a Method"):
    search.method(small, batch=4)
  assert np.isfinite(res.best_step_time_s)
  with pytest.raises(ValueError, match=r"random: tables='yes' must be True, False or None"):
    search.method("random", tables="yes")
