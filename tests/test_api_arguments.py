"""One argument order, ``(job, plan, cluster)``, and arguments checked by name at
the public entry points."""

import pytest

import costmodel as cm
import search


@pytest.fixture(scope="module")
def case(h100):
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0)
  cluster = cm.Cluster(h100, gpus_per_node=8, nodes=1)
  return job, cm.Plan.colocated(job, cluster), cluster


def test_validate_plan_takes_the_order_of_estimate(case):
  job, plan, cluster = case
  cm.validate_plan(job, plan, cluster)
  with pytest.raises(TypeError, match=r"validate_plan: job must be RLJob, got Plan "
                                      r"\(the order is job, plan, cluster\)"):
    cm.validate_plan(plan, job, cluster)


@pytest.mark.parametrize("args, match", [
    ((None, "plan", "cluster"), "estimate: job must be RLJob, got NoneType$"),
    (("job", "cluster", "plan"), "estimate: plan must be Plan, got Cluster"),
    (("job", "plan", 8), "estimate: cluster must be Cluster, got int$"),
])
def test_estimate_names_the_argument_of_the_wrong_type(case, args, match):
  job, plan, cluster = case
  given = {"job": job, "plan": plan, "cluster": cluster}
  with pytest.raises(TypeError, match=match):
    cm.estimate(*(given.get(a, a) if isinstance(a, str) else a for a in args))


def test_estimate_refuses_efficiency_of_the_wrong_type(case):
  with pytest.raises(TypeError, match="efficiency must be Efficiency or None, got dict"):
    cm.estimate(*case, efficiency={})


@pytest.mark.parametrize("field", ["tp", "pp", "cp", "ep", "etp", "vpp"])
def test_parallel_degrees_are_integers(field):
  pp = {"pp": 2.0} if field == "vpp" else {}  # interleaving needs a pipeline
  assert float(getattr(cm.Parallel(**{**pp, field: 2.0}), field)) == 2.0
  with pytest.raises(ValueError, match=rf"Parallel: {field}=3.5 must be an integer"):
    cm.Parallel(**{**pp, field: 3.5})


def test_a_count_written_as_text_is_refused():
  with pytest.raises(ValueError, match=r"RLJob: prompts_per_step='512' must be a number"):
    cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step="512")


@pytest.mark.parametrize("call, match", [
    (lambda job, c: search.optimize(None, c), "optimize: job must be RLJob, got NoneType"),
    (lambda job, c: search.cut_dp(job, "2x8"), "cut_dp: cluster must be Cluster, got str"),
    (lambda job, c: search.random_search(c, job, "split", 1.0),
     "family 'split': job must be RLJob, got Cluster"),
    (lambda job, c: search.lower_bound(job, None, "split"),
     "family 'split': cluster must be Cluster, got NoneType"),
])
def test_search_methods_name_the_argument_of_the_wrong_type(case, call, match):
  job, _, cluster = case
  with pytest.raises(TypeError, match=match):
    call(job, cluster)
