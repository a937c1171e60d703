"""What makes RL log-prob passes and updates slower than their mean share of the work.

* a log-prob pass through a single controller pays for its per-token outputs,
  padded to the maximum response, going back to the driver
  (:func:`infer.returned_outputs_s`), which more GPUs do not shorten;
* an update waits for the data-parallel rank that holds its longest sequence
  (:func:`train.longest_sequence_factor`), so past some GPU count more GPUs
  stop shortening it, the sooner the longer the maximum response;
* the fully asynchronous veRL runs cannot share their colocated twins' mean
  response: the trainer would run above the GPUs' peak.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.fit.validation import rl_cases
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import train as train_lib

EFF = cm.Efficiency()
MODEL = cm.models.get("qwen2.5-7b")


@pytest.fixture(scope="module")
def cluster(h100):
  return cm.Cluster(h100, gpus_per_node=8, nodes=64)


def _job(mean=1000.0, max_len=4096.0, bins=None, prompts=64.0, samples=8.0):
  return cm.RLJob("grpo", MODEL, prompts_per_step=prompts, samples_per_prompt=samples,
                  prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(mean, max_len, bins=bins),
                  mini_batches=4)


# ----- log-prob passes: padded outputs back to the controller ------------------


@pytest.mark.parametrize("gpus", [8.0, 64.0])
def test_log_prob_outputs_return_padded_whatever_the_gpus(cluster, gpus):
  job = _job()
  layout = cm.Parallel(zero_stage=3.0)
  fast = cm.Efficiency(controller_return_bytes_per_s=1e30)
  base = infer_lib.infer(MODEL, job, layout, gpus, cluster, fast)
  paid = infer_lib.infer(MODEL, job, layout, gpus, cluster, EFF)
  ref = infer_lib.infer(MODEL, job, layout, gpus, cluster, EFF, entropy=False)
  # 512 samples x 4,096 padded response tokens x (log-prob + entropy, fp32).
  padded = 512.0 * 4096.0
  assert float(paid.overhead_s - base.overhead_s) == pytest.approx(
      padded * 8.0 / EFF.controller_return_bytes_per_s, rel=1e-5)
  # The reference pass returns one fp32 per token, no entropy.
  assert float(ref.overhead_s - base.overhead_s) == pytest.approx(
      padded * 4.0 / EFF.controller_return_bytes_per_s, rel=1e-5)
  assert float(paid.compute_s) == pytest.approx(float(base.compute_s), rel=1e-6)
  spmd = infer_lib.infer(MODEL, job, layout, gpus, cluster, EFF, controller=False)
  spmd_fast = infer_lib.infer(MODEL, job, layout, gpus, cluster, fast, controller=False)
  assert float(spmd.overhead_s) == pytest.approx(float(spmd_fast.overhead_s), rel=1e-9)


def test_returned_outputs_follow_the_maximum_not_the_mean():
  short = _job(mean=500.0, max_len=4096.0)
  long = _job(mean=2000.0, max_len=4096.0)
  assert float(infer_lib.returned_outputs_s(short, EFF)) == pytest.approx(
      float(infer_lib.returned_outputs_s(long, EFF)), rel=1e-9)
  wide = _job(mean=500.0, max_len=8192.0)
  assert float(infer_lib.returned_outputs_s(wide, EFF)) == pytest.approx(
      2.0 * float(infer_lib.returned_outputs_s(short, EFF)), rel=1e-9)


def test_controller_return_rate_is_checked():
  with pytest.raises(ValueError, match="controller_return_bytes_per_s"):
    cm.Efficiency(controller_return_bytes_per_s=0.0)


# ----- updates wait for the rank with the longest sequence ----------------------


def _update(job, gpus, cluster, eff=EFF, tau=0.0):
  layout = cm.Parallel(zero_stage=3.0, micro_batch=4.0, recompute=2.0)
  return train_lib.train(MODEL, job, layout, gpus, cluster, eff, tau)


def _update_s(job, gpus, cluster, eff=EFF, tau=0.0):
  return _update(job, gpus, cluster, eff, tau).time_s


def test_more_gpus_stop_shortening_the_update_once_the_longest_sequence_dominates(cluster):
  # 1,024 sequences per update.
  uniform = _job(mean=1000.0, max_len=1000.0, bins=1, prompts=512.0)
  tail = _job(mean=1000.0, max_len=32768.0, prompts=512.0)
  # Uniform lengths: the rank with the longest sequence is every rank.
  u16, u128 = (float(_update(uniform, g, cluster).compute_s) for g in (16.0, 128.0))
  assert u128 == pytest.approx(u16 / 8.0, rel=0.15)
  # A 32k tail: 64 sequences per rank on 16 GPUs outweigh the longest one,
  # 8 per rank on 128 do not: the update stays at one pass over it.
  t16, t128 = (float(_update(tail, g, cluster).compute_s) for g in (16.0, 128.0))
  assert t128 > 2.0 * t16 / 8.0


def test_longest_sequence_factor_by_hand(cluster):
  job = _job(mean=1000.0, max_len=32768.0)
  layout = cm.Parallel(zero_stage=3.0, micro_batch=4.0, recompute=2.0)
  # The longest pass: one 512 + 32768-token sequence, fwd + bwd + recompute.
  knots = np.asarray(job.response.knots)
  p = 1.0 - (1.0 - 1.0 / knots.size) ** 128  # some of the 128 reaches the top bin
  longest = 512.0 + knots[-2] + p * (knots[-1] - knots[-2])
  assert float(infer_lib.expected_longest(knots, 128.0)) == pytest.approx(longest - 512.0,
                                                                          rel=1e-5)
  work = cm._src.ops.layers.forward_work(MODEL, longest, 0.5 * longest, tp=1.0, pp=1.0,
                                         cp=1.0, ep=1.0, param_bytes=job.param_bytes)
  pt = cm._src.stages.common.pass_time(work, 4.0, cluster, EFF, 1.0, 1.0, 1.0, 0.0,
                                       collective_multiplier=3.0)
  long_s = float(pt.compute_s + pt.memory_s + pt.comm_s)
  f = train_lib.longest_sequence_factor(MODEL, job, layout, cluster, EFF, 128.0, 0.5 * long_s,
                                        4.0, 3.0)
  assert float(f) == pytest.approx(2.0, rel=1e-6)
  f = train_lib.longest_sequence_factor(MODEL, job, layout, cluster, EFF, 128.0, 3.0 * long_s,
                                        4.0, 3.0)
  assert float(f) == pytest.approx(1.0, rel=1e-9)


def test_same_mean_longer_maximum_lengthens_the_update_at_scale(cluster):
  short = _job(mean=1000.0, max_len=4096.0)
  long = _job(mean=1000.0, max_len=32768.0)
  assert float(_update(long, 256.0, cluster).compute_s) > 1.5 * float(
      _update(short, 256.0, cluster).compute_s)


def test_fixed_length_training_is_not_affected(cluster):
  job = _job(mean=1000.0, max_len=32768.0)
  layout = cm.Parallel(zero_stage=3.0, micro_batch=1.0)
  a = train_lib.train(MODEL, job, layout, 256.0, cluster, EFF, seq_len=2048.0,
                      global_batch=256.0, updates=1.0)
  b = train_lib.train(MODEL, _job(mean=1000.0, max_len=1000.0, bins=1), layout, 256.0,
                      cluster, EFF, seq_len=2048.0, global_batch=256.0, updates=1.0)
  assert float(a.time_s) == pytest.approx(float(b.time_s), rel=1e-9)


def test_update_gradient_through_the_longest_sequence_is_finite(cluster):
  job = _job(mean=1000.0, max_len=32768.0)
  g = jax.grad(lambda gpus: _update_s(job, gpus, cluster, tau=0.1))(256.0)
  assert np.isfinite(float(g))


# ----- the fully asynchronous runs' own mean response ---------------------------


def test_async_trainer_at_the_colocated_mean_would_exceed_peak():
  """rl:2 trains 8,192 samples on 16 H20 in 313.8 s: at the ~1,200-token mean the
  colocated rl:1 needs, fwd + bwd + full recompute (attention at the length-biased
  context) is above the GPUs' peak, so the two modes cannot share a mean."""
  h20 = cm.hardware.get("H20")
  model = cm.models.get("qwen2.5-math-7b")
  runs = {r.key: r for r in rl_cases._dapo28k_runs(1200.0, 600.0)}
  colocated_job = runs["verl-dapo7b-colocated-32"].job
  tokens = 512.0 * 16.0 * (256.0 + 1200.0)
  ctx = float(infer_lib.attention_context(colocated_job))
  flops = tokens * 4.0 * model.forward_flops_per_token(ctx)
  assert flops / (16.0 * h20.peak_flops_per_s * 313.8) > 1.05
  assert float(runs["verl-dapo7b-async-32"].job.response.mean) == pytest.approx(600.0)
  assert float(colocated_job.response.mean) == pytest.approx(1200.0)
