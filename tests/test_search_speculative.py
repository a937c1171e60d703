"""Speculative decoding as a search option: on only where it pays, with the framework's keys."""

import pytest

import costmodel as cm
import search
from search._src import result as result_lib
from search._src import speculative_option


def _result(job, cluster, plan):
  est = cm.estimate(job, plan, cluster)
  return result_lib.SearchResult(method="optimize", best_plan=plan, best_estimate=est,
                                 family="split", top=((plan, est),), top_families=("split",),
                                 best_by_family_s={"split": float(est.step_time_s)})


def _job(prompts, mean, max_len):
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=prompts,
                  samples_per_prompt=1.0, prompt_len=256.0,
                  response=cm.ResponseLength.from_mean_max(mean, max_len))


@pytest.fixture(scope="module")
def cluster():
  return cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=1)


def test_turned_on_where_it_pays_and_off_where_it_does_not(cluster):
  spec = cm.Speculative("eagle", draft_tokens=3.0, acceptance=0.7)
  # Few long responses per engine: decode is memory bound, the draft pays.
  small = _job(8.0, 4000.0, 8192.0)
  plan = cm.Plan.split(small, cluster, 4, train=cm.Parallel(tp=2.0), engine=cm.Engine(tp=1.0))
  base = _result(small, cluster, plan)
  on = speculative_option.apply(base, small, cluster, spec)
  assert on.best_plan.engine.speculative == spec
  assert float(on.best_estimate.step_time_s) < float(base.best_estimate.step_time_s)
  assert on.best_by_family_s["split"] == pytest.approx(float(on.best_estimate.step_time_s))
  # Thousands of short responses per engine: compute bound, the verify pass costs more.
  big = _job(8192.0, 128.0, 128.0)
  plan = cm.Plan.split(big, cluster, 4, train=cm.Parallel(tp=2.0),
                       engine=cm.Engine(tp=1.0, max_seqs=4096.0))
  base = _result(big, cluster, plan)
  off = speculative_option.apply(base, big, cluster, spec)
  assert off.best_plan.engine.speculative is None
  assert float(off.best_estimate.step_time_s) == float(base.best_estimate.step_time_s)


def test_framework_keys():
  spec = cm.Speculative("mtp", draft_tokens=3.0, acceptance=0.7)
  assert speculative_option.framework_keys("nemo_rl", spec) == {
      "policy.generation.vllm_kwargs.speculative_config.method": "mtp",
      "policy.generation.vllm_kwargs.speculative_config.num_speculative_tokens": 3}
  keys = speculative_option.framework_keys("slime", spec)
  assert keys["--sglang-speculative-algorithm"] == "EAGLE"
  assert keys["--sglang-speculative-num-draft-tokens"] == 4
  draft = cm.Speculative("draft", 4.0, 0.6, draft_model=cm.models.get("qwen2.5-1.5b"))
  assert speculative_option.framework_keys("nemo_rl", draft)[
      "policy.generation.vllm_kwargs.speculative_config.model"] == "qwen2.5-1.5b"
  with pytest.raises(ValueError, match=r"framework='verl' passes no speculative settings.*"
                     r"nemo_rl, slime"):
    speculative_option.framework_keys("verl", spec)


def test_search_refuses_a_draft_the_framework_or_model_cannot_run(cluster):
  job = _job(8.0, 1000.0, 2048.0)
  with pytest.raises(ValueError, match="framework='openrlhf' passes no speculative settings"):
    search.optimize(job, cluster, framework="openrlhf",
                    speculative=cm.Speculative("eagle", 3.0, 0.7))
  with pytest.raises(ValueError, match="kind='mtp' needs a model with MTP layers"):
    search.optimize(job, cluster, speculative=cm.Speculative("mtp", 3.0, 0.7))


@pytest.mark.parametrize("text, match", [
    ("eagle:3", "must be KIND:TOKENS:ACCEPTANCE"),
    ("eagle:three:0.7", "TOKENS='three'"),
    ("medusa:3:0.7", "kind='medusa' is not one of"),
    ("draft:3:0.7:gpt-5", "unknown model 'gpt-5'"),
])
def test_parse_refuses_bad_flags(text, match):
  with pytest.raises(ValueError, match=match):
    speculative_option.parse(text, _job(8.0, 1000.0, 2048.0))
  assert speculative_option.parse("eagle:3:0.7", _job(8.0, 1000.0, 2048.0)).draft_tokens == 3.0
