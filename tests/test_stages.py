"""Stage models against phenomena with hand-derived expectations.

Decode turns compute bound past the roofline's ridge point; tensor parallelism
shortens decode sub-linearly; ZeRO memory and traffic follow Rajbhandari et
al.; the pipeline bubble follows (p - 1) / (v m) (Narayanan et al.); a 70B
model's Adam state does not fit on one GPU; generation scales with the samples
and the response tail; weight sync grows with model size and tensor count.
"""

import itertools
import re

import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import sync as sync_lib
from costmodel._src.stages import train as train_lib

GIB = 2.0**30
EFF = cm.Efficiency()


@pytest.fixture(scope="module")
def one_node(h100):
  return cm.Cluster(h100, gpus_per_node=8, nodes=1)


@pytest.fixture(scope="module")
def eight_nodes(h100):
  return cm.Cluster(h100, gpus_per_node=8, nodes=8)


def _job(model, samples=8.0, mean=1000.0, max_len=4096.0, prompts=64.0, algorithm="grpo"):
  return cm.RLJob(algorithm, model, prompts_per_step=prompts, samples_per_prompt=samples,
                  prompt_len=512.0, response=cm.ResponseLength.from_mean_max(mean, max_len))


# ----- decode: memory bound, then compute bound past the ridge point ---------


def test_decode_turns_compute_bound_near_the_ridge_batch(h100, one_node):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model)
  batch = 2.0 ** (np.arange(0, 81) / 8.0)  # 1 .. 1024, 8 points per octave
  compute_s, memory_s, comm_s = gen_lib.decode_round(
      model, job, cm.Engine(), one_node, EFF, jnp.asarray(batch), jnp.asarray(128.0))
  compute_s, memory_s = np.asarray(compute_s), np.asarray(memory_s)
  np.testing.assert_array_equal(np.asarray(comm_s), 0.0)  # TP 1: no collectives

  # Batch 1 reads ~15 GB of weights for ~15 GFLOP: memory bound; batch 1024
  # does 1024x the FLOPs for about the same bytes: compute bound.
  assert memory_s[0] > 100 * compute_s[0]
  assert compute_s[-1] > 2 * memory_s[-1]
  # Memory share falls monotonically while the weight GEMMs are memory bound.
  share = memory_s / (memory_s + compute_s)
  assert np.all(np.diff(share[batch <= 128.0]) <= 1e-6)
  # Past the ridge the GEMMs are compute bound and what stays memory time is
  # the attention kernel streaming the KV cache, run after the GEMMs, not
  # hidden under them: 1,024 x 128 tokens x 57,344 KV bytes per token (28
  # layers x 2 x 4 KV heads x 128 x 2 bytes) at the HBM's best rate.
  kv_bytes = 1024.0 * 128.0 * 28 * 2 * 4 * 128 * 2
  kv_s = kv_bytes / (h100.hbm_bandwidth_bytes_per_s * h100.hbm_efficiency_max)
  assert memory_s[-1] == pytest.approx(kv_s, rel=0.05)

  # Ridge by hand: a decode token does 2 FLOPs per weight and reads
  # param_bytes bytes per weight (the KV of a 128-token context is small), so
  # the intensity is 2 B / param_bytes FLOP/byte; it meets the ridge
  # peak * eff_mm / (bw * eff_hbm) at
  #   B_ridge = peak * eff_mm_max / (bw * eff_hbm_max) * param_bytes / 2,
  # 255 sequences on H100. The short-GEMM efficiency and the KV reads push the
  # model's crossover a little above it.
  ridge = (h100.peak_flops_per_s * h100.matmul_efficiency_max
           / (h100.hbm_bandwidth_bytes_per_s * h100.hbm_efficiency_max)
           * job.param_bytes / 2.0)
  assert ridge == pytest.approx(255.0, rel=0.01)
  crossover = batch[np.argmax(compute_s >= memory_s)]
  assert ridge / 2 <= crossover <= 2 * ridge


def test_tensor_parallel_shortens_decode_sub_linearly(one_node):
  # A 70B model: at 7B the model's all-reduce latency (2 (n-1) ring steps of
  # 2.5 us, twice per layer) already outweighs TP 8's saved weight reads.
  model = cm.models.get("llama-3.1-70b")
  job = _job(model)
  per_token, comm = [], []
  for tp in (1.0, 2.0, 4.0, 8.0):
    c, m, x = gen_lib.decode_round(model, job, cm.Engine(tp=tp), one_node, EFF, jnp.ones(()),
                                   jnp.asarray(1024.0))
    per_token.append(float(c + m + x))
    comm.append(float(x))
  assert all(a > b for a, b in itertools.pairwise(per_token))
  speedup = per_token[0] / per_token[-1]
  assert 2.0 < speedup < 8.0
  assert comm[0] == 0.0
  assert all(a < b for a, b in itertools.pairwise(comm))


# ----- ZeRO: traffic and memory per GPU (Rajbhandari et al. SC'20) -----------


@pytest.mark.parametrize("zero_stage,expected_psi", [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.5)])
def test_zero3_moves_one_and_a_half_times_the_dp_bytes(zero_stage, expected_psi):
  # ZeRO 0-2: reduce-scatter + all-gather of Psi elements = one all-reduce
  # buffer of Psi; ZeRO-3 adds a second parameter all-gather: 3 Psi, i.e. a
  # buffer of 1.5 Psi (gradient bytes per element).
  job = _job(cm.models.get("qwen2.5-1.5b"))
  psi = 1e9
  got = train_lib.dp_traffic_bytes(psi, job, zero_stage)
  assert float(got) == pytest.approx(expected_psi * psi * job.grad_bytes, rel=1e-6)


@pytest.mark.parametrize("dp", [1.0, 8.0, 64.0])
@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_zero_memory_follows_rajbhandari(zero_stage, dp):
  # Mixed-precision Adam: 2 bytes of weights, 2 of gradients, K = 12 of
  # optimizer state per parameter (Rajbhandari et al., Figure 1):
  #   baseline 16 Psi, ZeRO-1 4 Psi + 12 Psi / d, ZeRO-2 2 Psi + 14 Psi / d,
  #   ZeRO-3 16 Psi / d.
  job = _job(cm.models.get("qwen2.5-1.5b"))
  psi = 7.5e9
  expected = {0: 16 * psi, 1: 4 * psi + 12 * psi / dp, 2: 2 * psi + 14 * psi / dp,
              3: 16 * psi / dp}[zero_stage]
  weights, grads, opt = train_lib.zero_memory(psi, job, zero_stage, dp, 0.0)
  assert float(weights + grads + opt) == pytest.approx(expected, rel=1e-6)
  assert float(weights) == pytest.approx(2 * psi / (dp if zero_stage >= 3 else 1), rel=1e-6)


def test_offload_moves_the_optimizer_and_zero3_weights_to_the_host():
  job = _job(cm.models.get("qwen2.5-1.5b"))
  psi, dp = 1e9, 8.0
  w1, g1, o1 = train_lib.zero_memory(psi, job, 1, dp, 1.0)
  assert (float(w1), float(g1), float(o1)) == pytest.approx((2 * psi, 2 * psi, 0.0))
  w3, g3, o3 = train_lib.zero_memory(psi, job, 3, dp, 1.0)
  assert (float(w3), float(g3), float(o3)) == pytest.approx((0.0, 2 * psi / dp, 0.0))


# ----- pipeline bubble (Narayanan et al. SC'21) -------------------------------


def _pipeline_train(cluster, global_batch, micro_batch, vpp, pp=4.0):
  model = cm.models.get("llama-2-7b")
  job = _job(model)
  layout = cm.Parallel(tp=1.0, pp=pp, micro_batch=micro_batch, zero_stage=1.0, recompute=2.0,
                       vpp=vpp)
  # dp = 1: the pool is one pipeline.
  return train_lib.train(model, job, layout, pp, cluster, EFF, global_batch=global_batch,
                         seq_len=2048.0, updates=1.0)


def _busy_s(cost):
  return cost.compute_s + cost.memory_s + cost.comm_s


@pytest.mark.parametrize("vpp", [1.0, 2.0])
def test_bubble_is_p_minus_1_over_v_micro_batch_times(x64, one_node, vpp):
  # The busy time of an update is m * t_mb + (optimizer + DP), with t_mb the
  # time of one micro-batch on one stage (passes + hand-offs) and the rest
  # independent of m. Two batches of m = 8 and m = 16 micro-batches of the
  # same size give t_mb = (busy_16 - busy_8) / 8, and the 1F1B bubble is
  # (p - 1) / v stage passes: bubble_s = (p - 1) / v * t_mb exactly.
  pp = 4.0
  c8 = _pipeline_train(one_node, 8.0, 1.0, vpp, pp)
  c16 = _pipeline_train(one_node, 16.0, 1.0, vpp, pp)
  assert float(c8.extras["micro_batches"]) == 8.0
  assert float(c16.extras["micro_batches"]) == 16.0
  t_mb = float(_busy_s(c16) - _busy_s(c8)) / 8.0
  assert float(c8.bubble_s) == pytest.approx(float(c16.bubble_s), rel=1e-12)
  assert float(c8.bubble_s) / t_mb == pytest.approx((pp - 1.0) / vpp, rel=1e-9)
  # So the bubble's share of the m micro-batches is (p - 1) / (v m).
  assert float(c8.bubble_s) / (8.0 * t_mb) == pytest.approx((pp - 1.0) / (vpp * 8.0),
                                                            rel=1e-9)


def test_more_micro_batches_shrink_the_bubble_fraction(one_node):
  fractions = []
  for micro_batch in (8.0, 4.0, 2.0, 1.0):  # m = 8, 16, 32, 64 at a batch of 64
    c = _pipeline_train(one_node, 64.0, micro_batch, 1.0)
    fractions.append(float(c.bubble_s / c.time_s))
    # Bubble over the m stage passes: (p - 1) / m, plus the hand-offs' share.
    m = 64.0 / micro_batch
    assert float(c.extras["bubble_fraction"]) == pytest.approx(3.0 / m, rel=0.01)
  assert all(a > b for a, b in itertools.pairwise(fractions))
  # Roughly (p - 1) / m of the busy time at m = 8 and 64 (bubble share of the
  # whole update is a little lower: the optimizer step is not in the bubble).
  assert fractions[0] == pytest.approx(3.0 / (8.0 + 3.0), rel=0.15)
  assert fractions[-1] == pytest.approx(3.0 / (64.0 + 3.0), rel=0.15)


def test_interleaving_halves_the_bubble(one_node):
  plain = _pipeline_train(one_node, 64.0, 1.0, 1.0)
  interleaved = _pipeline_train(one_node, 64.0, 1.0, 2.0)
  # Exactly half in stage passes; the extra hand-offs of two chunks make it a
  # little more than half in seconds.
  ratio = float(interleaved.bubble_s / plain.bubble_s)
  assert 0.5 <= ratio < 0.52
  ratio_fraction = float(interleaved.extras["bubble_fraction"] / plain.extras["bubble_fraction"])
  assert 0.5 <= ratio_fraction < 0.52


def test_no_bubble_without_pipeline(one_node):
  c = _pipeline_train(one_node, 16.0, 1.0, 1.0, pp=1.0)
  assert float(c.bubble_s) == 0.0


# ----- memory: a 70B model's Adam state does not fit on one GPU ---------------


def test_70b_adam_state_does_not_fit_on_one_gpu(h100, one_node):
  model = cm.models.get("llama-3.1-70b")
  job = _job(model, samples=4.0, mean=500.0, max_len=2048.0, prompts=32.0)
  plan = cm.Plan.colocated(job, one_node, train=cm.Parallel(tp=1.0, zero_stage=0.0),
                           engine=cm.Engine(tp=8.0))
  est = cm.estimate(job, plan, one_node)
  assert not bool(est.feasible)

  i = est.stage_names.index("actor_update")
  row = np.asarray(est.memory_bytes)[i]
  psi = float(model.total_params)
  # Unsharded: 2 Psi of weights and 2 Psi of gradients; the optimizer column
  # holds the 12 Psi Adam state plus the reference weights kept resident.
  assert row[0] == pytest.approx(2 * psi, rel=1e-5)
  assert row[1] == pytest.approx(2 * psi, rel=1e-5)
  assert row[2] == pytest.approx(12 * psi + 2 * psi, rel=1e-5)
  assert row.sum() > 16 * psi > h100.hbm_bytes

  msgs = [v for v in est.violations if "'actor_update'" in v]
  assert len(msgs) == 1
  match = re.search(r"needs ([\d.]+) GiB per GPU \((.*)\) but ([\d.]+) GiB are available: "
                    r"short by ([\d.]+) GiB", msgs[0])
  assert match is not None, msgs[0]
  need, parts, avail, short = match.groups()
  need, avail, short = float(need), float(avail), float(short)
  # The parts, the need and the shortfall agree (to the printed 0.1 GiB).
  listed = [float(p.split()[-1]) for p in parts.split(", ")]
  assert sum(listed) == pytest.approx(need, abs=0.05 * len(listed))
  assert need == pytest.approx(row.sum() / GIB, abs=0.05)
  assert avail == pytest.approx(h100.hbm_bytes / GIB, abs=0.05)
  assert short == pytest.approx(need - avail, abs=0.1)


# ----- generation --------------------------------------------------------------


@pytest.fixture(scope="module")
def gen_setup(cluster_2x8):
  return cm.models.get("qwen2.5-7b"), cluster_2x8


@pytest.mark.parametrize("n", [4.0, 16.0])
def test_n_samples_generate_n_times_the_tokens(gen_setup, n):
  model, cluster = gen_setup
  engine = cm.Engine(tp=2.0)
  one = gen_lib.generate(model, _job(model, samples=1.0), engine, 16.0, cluster, EFF)
  many = gen_lib.generate(model, _job(model, samples=n), engine, 16.0, cluster, EFF)
  assert float(many.flops) == pytest.approx(n * float(one.flops), rel=1e-5)

  def tokens(c):
    return float(c.extras["decode_tokens_per_s"] * c.extras["decode_s"])

  # Per engine: 64 n / 8 replicas sequences of mean length 1,000.
  assert tokens(one) == pytest.approx(64.0 / 8.0 * 1000.0, rel=1e-5)
  assert tokens(many) == pytest.approx(n * tokens(one), rel=1e-5)
  # More sequences per engine raise the decode rate (a larger batch).
  assert float(many.extras["decode_tokens_per_s"]) > float(one.extras["decode_tokens_per_s"])
  assert float(many.time_s) > float(one.time_s)


def test_longer_max_response_never_shortens_generation(gen_setup):
  model, cluster = gen_setup
  times, tails = [], []
  for max_len in (1024.0, 2048.0, 4096.0, 8192.0, 16384.0):
    c = gen_lib.generate(model, _job(model, mean=1000.0, max_len=max_len), cm.Engine(tp=2.0),
                         16.0, cluster, EFF)
    times.append(float(c.time_s))
    tails.append(float(c.extras["tail_share"]))
  assert all(a <= b for a, b in itertools.pairwise(times))
  assert all(a <= b for a, b in itertools.pairwise(tails))


@pytest.mark.parametrize("engine", [cm.Engine(tp=1.0), cm.Engine(tp=2.0, max_seqs=16.0),
                                    cm.Engine(tp=4.0, memory_fraction=0.3),
                                    cm.Engine(tp=1.0, memory_fraction=0.25, max_seqs=4096.0)])
@pytest.mark.parametrize("samples", [1.0, 16.0])
def test_generation_invariants(gen_setup, engine, samples):
  model, cluster = gen_setup
  c = gen_lib.generate(model, _job(model, samples=samples), engine, 16.0, cluster, EFF)
  e = c.extras
  assert 0.0 < float(e["steady_time_s"]) <= float(c.time_s)
  assert 0.0 <= float(e["tail_share"]) <= 1.0
  per_engine = 64.0 * samples / float(e["replicas"])
  assert float(e["replicas"]) == pytest.approx(16.0 / float(engine.tp))
  assert float(e["concurrency"]) <= float(engine.max_seqs) * (1 + 1e-6)
  assert float(e["concurrency"]) <= per_engine * (1 + 1e-6)
  assert 0.0 < float(e["mean_concurrency"]) <= float(e["concurrency"]) * (1 + 1e-6)
  assert float(c.time_s) == pytest.approx(
      float(c.compute_s + c.memory_s + c.comm_s + c.bubble_s + c.overhead_s), rel=1e-6)


def test_kv_capacity_falls_with_the_memory_fraction(gen_setup):
  model, cluster = gen_setup
  job = _job(model, samples=16.0)
  kv, conc = [], []
  for fraction in (0.9, 0.6, 0.4, 0.25):
    c = gen_lib.generate(model, job, cm.Engine(tp=1.0, memory_fraction=fraction), 16.0,
                         cluster, EFF)
    kv.append(float(c.extras["kv_tokens"]))
    conc.append(float(c.extras["concurrency"]))
  assert all(a > b for a, b in itertools.pairwise(kv))
  assert all(a >= b for a, b in itertools.pairwise(conc))
  assert conc[-1] < conc[0]  # at 25% the cache, not the 64 queued sequences, binds
  # KV tokens = (fraction * HBM - weights - workspace) / KV bytes per token.
  hw = cluster.accelerator
  weights = float(model.total_params) * job.param_bytes
  per_token = model.kv_bytes_per_token(job.kv_bytes)
  expected = (0.25 * hw.hbm_bytes - weights - gen_lib.WORKSPACE_BYTES) / per_token
  assert kv[-1] == pytest.approx(expected, rel=1e-5)


# ----- weight sync -------------------------------------------------------------


def _disaggregated_sync(model, cluster, gpus, eff=EFF, backend="per_tensor"):
  return sync_lib.weight_sync(model, _job(model), cm.Parallel(), gpus,
                              cm.Engine(tp=8.0, sync_backend=backend), gpus, False, cluster, eff)


def test_sync_grows_with_model_size(eight_nodes):
  names = ("qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-32b", "llama-3.1-70b")
  sizes = [cm.models.get(n).total_params for n in names]
  assert sizes == sorted(sizes)
  costs = [_disaggregated_sync(cm.models.get(n), eight_nodes, 16.0) for n in names]
  assert all(float(a.time_s) < float(b.time_s) for a, b in itertools.pairwise(costs))
  assert all(float(a.comm_s) < float(b.comm_s) for a, b in itertools.pairwise(costs))


def test_sync_falls_with_more_nics(eight_nodes):
  model = cm.models.get("llama-3.1-70b")
  gpus = (8.0, 16.0, 32.0)
  costs = [_disaggregated_sync(model, eight_nodes, g, backend="reshard") for g in gpus]
  assert all(float(a.time_s) >= float(b.time_s) for a, b in itertools.pairwise(costs))
  # By hand (the shard-to-shard reshard backend; the number moved when the
  # backends were introduced: the non-MLP weights now go whole to every engine
  # GPU, as NeMo-RL's misc path does): the MLP bytes cross min(senders,
  # receivers) NICs (every FSDP rank sends), and each generation GPU receives
  # its TP-8 shard of them through its own NIC; the slower of the two sets
  # the time.
  hw = eight_nodes.accelerator
  nic = hw.scaleout_bandwidth_bytes_per_s * hw.scaleout_efficiency
  total_bytes = model.total_params * 2.0
  mlp_bytes = model.n_layers * 3 * model.hidden * model.ffn_hidden * 2.0
  for g, c in zip(gpus, costs, strict=True):
    expected = (max(mlp_bytes / (g * nic), mlp_bytes / 8.0 / nic)
                + (total_bytes - mlp_bytes) / nic + hw.scaleout_latency_s)
    assert float(c.comm_s) == pytest.approx(expected, rel=1e-5)
  # Fewer senders than receivers: the cross-network part dominates and falls.
  small = [_disaggregated_sync(model, eight_nodes, g, backend="reshard") for g in (2.0, 4.0)]
  assert float(small[0].time_s) > float(small[1].time_s)


def test_many_expert_tensors_make_moe_sync_slower_than_dense(eight_nodes):
  moe = cm.models.get("qwen3-30b-a3b")  # 128 experts x 48 layers: ~18.8k tensors
  dense = cm.models.get("qwen2.5-32b")  # a little larger, ~800 tensors
  assert moe.total_params < dense.total_params
  assert moe.n_tensors > 10 * dense.n_tensors
  c_moe = _disaggregated_sync(moe, eight_nodes, 16.0)
  c_dense = _disaggregated_sync(dense, eight_nodes, 16.0)
  assert float(c_moe.time_s) > 2.0 * float(c_dense.time_s)
  assert float(c_moe.overhead_s - c_dense.overhead_s) == pytest.approx(
      (moe.n_tensors - dense.n_tensors) * EFF.sync_per_tensor_s, rel=1e-5)
  # Without the per-tensor term the larger dense model is the slower one.
  no_tensor = cm.Efficiency(sync_per_tensor_s=0.0)
  assert float(_disaggregated_sync(moe, eight_nodes, 16.0, no_tensor).time_s) < float(
      _disaggregated_sync(dense, eight_nodes, 16.0, no_tensor).time_s)
