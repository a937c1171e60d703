"""Each new attention kind's models estimate a plan (hybrid, sliding-window, sparse)."""

import math

import pytest

import costmodel as cm

CASES = [
    # model, GPU, nodes, rollout GPUs, training layout, engine layout
    ("Qwen/Qwen3.5-9B", "H100", 2, 8, dict(tp=2.0), dict(tp=1.0)),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "H100", 4, 16, dict(tp=2.0, ep=8.0), dict(tp=4.0)),
    ("openai/gpt-oss-20b", "H100", 2, 8, dict(tp=2.0, ep=4.0), dict(tp=1.0)),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "B200", 16, 64, dict(tp=8.0, pp=4.0, ep=16.0),
     dict(tp=8.0, ep=8.0)),
]


@pytest.mark.parametrize("name, gpu, nodes, gen, train, engine", CASES,
                         ids=[c[0] for c in CASES])
def test_model_estimates_a_feasible_plan(name, gpu, nodes, gen, train, engine):
  job = cm.RLJob("grpo", cm.models.get(name), prompts_per_step=64.0, samples_per_prompt=8.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
  cluster = cm.Cluster(cm.hardware.get(gpu), gpus_per_node=8, nodes=nodes)
  plan = cm.Plan.split(job, cluster, gen, train=cm.Parallel(micro_batch=1.0, **train),
                       engine=cm.Engine(**engine))
  assert cm.validate_plan(job, plan, cluster) is None
  est = cm.estimate(job, plan, cluster)
  assert bool(est.feasible)
  assert math.isfinite(float(est.step_time_s)) and 0.0 < float(est.step_time_s) < 3600.0
  assert float(est.lower_bound_s) <= float(est.step_time_s)
