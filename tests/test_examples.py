"""The built-in MLPerf RL example job: its reference facts, and a plan on GB200 and GB300."""

import numpy as np
import pytest

import costmodel as cm


def test_mlperf_example_states_the_reference_configuration():
  assert cm.examples.names() == ("mlperf-rl-gbs256", "mlperf-rl-gbs512", "mlperf-rl-gbs1024")
  for name, prompts in zip(cm.examples.names(), (16.0, 32.0, 64.0), strict=True):
    job = cm.examples.job(name)
    assert job.actor.name == "Qwen/Qwen3.5-397B-A17B"
    assert job.algorithm == "grpo"
    assert float(job.prompts_per_step) * float(job.samples_per_prompt) == prompts * 16.0
    assert job.multi_turn.turns == 30
    assert cm.examples.staleness(name) == 1
  # Assumed lengths stay inside the benchmark's 65,536-token context.
  a = cm.examples.MLPERF_ASSUMED
  assert a["prompt_len"] + a["turns"] * (a["turn_tokens_mean"] + a["observation_tokens"]) <= (
      cm.examples.MLPERF_FACTS["context_cap"])
  cluster = cm.examples.cluster("mlperf-rl-gbs512")
  assert cluster.n_gpus == 256 and cluster.scaleup_domain == 72
  assert cluster.accelerator.name == "GB300"
  assert cm.examples.cluster("mlperf-rl-gbs512", "GB200").accelerator.name == "GB200"


def test_unknown_example_refused_by_name():
  with pytest.raises(ValueError, match=r"unknown example 'mlperf-rl'; known examples: "
                     r"mlperf-rl-gbs256"):
    cm.examples.job("mlperf-rl")


@pytest.mark.parametrize("gpu", ["GB200", "GB300"])
def test_reference_layout_plans_on_nvl72(gpu):
  name = "mlperf-rl-gbs512"
  job, cluster = cm.examples.job(name), cm.examples.cluster(name, gpu)
  f = cm.examples.MLPERF_FACTS
  gen_gpus = f["generate_nodes"] * f["gpus_per_node"]
  plan = cm.Plan.split(job, cluster, gen_gpus,
                       train=cm.Parallel(tp=float(f["train_tp"]), pp=float(f["train_pp"]),
                                         ep=float(f["train_ep"]), micro_batch=1.0),
                       engine=cm.Engine(tp=float(f["engine_tp"]), ep=float(f["engine_ep"])),
                       mode=cm.Mode(staleness=f["staleness"]))
  est = cm.estimate(job, plan, cluster)
  assert bool(est.feasible)
  assert 0.0 < float(est.step_time_s) < 3600.0
  # The 397B policy's weights, gradients and optimizer state fit each GPU once sharded over
  # TP4 x PP2 x EP32 (unsharded they would take several terabytes).
  weights_grads_opt = np.asarray(est.memory_bytes)[:, :3].sum(axis=1).max()
  assert weights_grads_opt < cluster.accelerator.hbm_bytes
