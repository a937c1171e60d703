"""Pools that name their own accelerator: a cluster of two GPU types.

A training pool of H800 and a rollout pool of H20: each stage is timed and its
memory checked on its own pool's GPU, the weight sync runs at the slower side's
NICs, and MFU counts each pool's peak.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.units import GIB
from costmodel._src.units import GIGA

GEN_GPUS = 8


@pytest.fixture(scope="module")
def job():
  return cm.RLJob("ppo", cm.models.get("qwen2.5-7b"), prompts_per_step=64.0,
                  samples_per_prompt=4.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


def _split(job, cluster, gen_device=None, train_device=None):
  plan = cm.Plan.split(job, cluster, GEN_GPUS, train=cm.Parallel(tp=2.0, zero_stage=1.0),
                       engine=cm.Engine(tp=2.0))
  gen, train = plan.pools
  return plan.replace(pools=(cm.Pool(gen.name, gen.gpus, gen_device),
                             cm.Pool(train.name, train.gpus, train_device)))


def _cluster(name):
  return cm.Cluster(cm.hardware.get(name), gpus_per_node=8, nodes=2)


def _times(est):
  return est.stage_times_s


def test_each_stage_runs_on_its_pools_device(job):
  h800, h20 = cm.hardware.get("H800"), cm.hardware.get("H20")
  mixed = cm.estimate(job, _split(job, _cluster("H800"), gen_device=h20), _cluster("H800"))
  all_h800 = cm.estimate(job, _split(job, _cluster("H800")), _cluster("H800"))
  all_h20 = cm.estimate(job, _split(job, _cluster("H20")), _cluster("H20"))
  t, t800, t20 = _times(mixed), _times(all_h800), _times(all_h20)
  assert t["generate"] == pytest.approx(t20["generate"], rel=1e-6)
  assert t["generate"] != pytest.approx(t800["generate"], rel=1e-3)
  for stage in ("actor_update", "critic_update", "old_log_prob", "reference", "values"):
    assert t[stage] == pytest.approx(t800[stage], rel=1e-6), stage
  assert float(mixed.gen_concurrency) == pytest.approx(float(all_h20.gen_concurrency))
  # Memory limits: each stage's pool's HBM.
  limits = dict(zip(mixed.stage_names, np.asarray(mixed.memory_limit_bytes), strict=True))
  assert limits["generate"] == pytest.approx(h20.hbm_bytes) == pytest.approx(96 * GIB)
  for stage in ("actor_update", "old_log_prob", "weight_sync"):
    assert limits[stage] == pytest.approx(h800.hbm_bytes) == pytest.approx(80 * GIB)
  # The H800's NIC is the slower one here (46.0 vs 46.5 GB/s achieved).
  assert t["weight_sync"] == pytest.approx(t800["weight_sync"], rel=1e-6)


def test_weight_sync_runs_at_the_slower_nic(job):
  cluster = _cluster("H800")
  slow = cm.hardware.get("H20").replace(name="H20-25GB", scaleout_bandwidth_bytes_per_s=25 * GIGA)
  est = cm.estimate(job, _split(job, cluster, gen_device=slow), cluster)
  got = est.stage_times_s["weight_sync"]
  # The same plan on a cluster of the slow-NIC GPU only.
  slow_cluster = cm.Cluster(slow, gpus_per_node=8, nodes=2)
  want = cm.estimate(job, _split(job, slow_cluster), slow_cluster).stage_times_s["weight_sync"]
  assert got == pytest.approx(want, rel=1e-6)
  # By hand, for the default per-tensor backend: the trainer exports the full
  # tensors (its pipeline stages in parallel), then streams them over the
  # slower NIC (16 GPUs span two nodes) to the engines.
  eff = cm.Efficiency()
  total = float(job.actor.total_params) * job.param_bytes
  nic = 25 * GIGA * slow.scaleout_efficiency * eff.link_efficiency
  pp = float(_split(job, cluster, gen_device=slow).role("actor").train.pp)
  move = total / (pp * eff.sync_export_bytes_per_s) + total / nic + 12e-6
  overhead = eff.sync_overhead_s + job.actor.n_tensors * eff.sync_per_tensor_s
  assert got == pytest.approx(move + overhead, rel=1e-6)
  # A slow sender bounds it the same way.
  est_rev = cm.estimate(job, _split(job, cluster, gen_device=cm.hardware.get("H20"),
                                    train_device=slow), cluster)
  assert est_rev.stage_times_s["weight_sync"] == pytest.approx(want, rel=1e-6)


def test_mfu_counts_each_pools_peak(job):
  h800, h20 = cm.hardware.get("H800"), cm.hardware.get("H20")
  cluster = _cluster("H800")
  mixed = cm.estimate(job, _split(job, cluster, gen_device=h20), cluster)
  ref = cm.estimate(job, _split(job, cluster), cluster)
  # The model FLOPs do not depend on the GPU: MFU x step x peak is the same.
  flops_mixed = float(mixed.mfu * mixed.step_time_s) * GEN_GPUS * (
      h800.peak_flops_per_s + h20.peak_flops_per_s)
  flops_ref = float(ref.mfu * ref.step_time_s) * 2 * GEN_GPUS * h800.peak_flops_per_s
  assert flops_mixed == pytest.approx(flops_ref, rel=1e-6)


def test_naming_the_clusters_accelerator_changes_nothing(job):
  cluster = _cluster("H800")
  default = cm.estimate(job, _split(job, cluster), cluster)
  named = cm.estimate(job, _split(job, cluster, gen_device="H800", train_device="h800"),
                      cluster)
  for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(named), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)


def test_pool_accelerator_preset_name_and_bad_value(job):
  assert cm.Pool("gen", 8.0, "H20").accelerator == cm.hardware.get("H20")
  with pytest.raises(ValueError, match="unknown hardware name='B300X'"):
    cm.Pool("gen", 8.0, "B300X")
  cluster = _cluster("H800")
  plan = _split(job, cluster)
  bad = plan.replace(pools=(cm.Pool("gen", 8.0, 42), plan.pools[1]))
  with pytest.raises(ValueError, match="pool 'gen' accelerator=42 must be a Hardware"):
    cm.estimate(job, bad, cluster)


def test_gradient_reaches_the_rollout_pools_device(job):
  cluster = _cluster("H800")
  plan = _split(job, cluster, gen_device=cm.hardware.get("H20"))

  def step(p):
    return cm.estimate(job, p, cluster).step_time_s

  g = jax.grad(step)(plan)
  # Decode on the H20 is compute bound at this batch: more FLOP/s, faster.
  d_peak = float(g.pools[0].accelerator.peak_flops_per_s)
  assert np.isfinite(d_peak) and d_peak < 0.0
  assert g.pools[1].accelerator is None
