"""Operation costs against hand-derived values.

Roofline time and its efficiency curves, alpha-beta collectives (flat and
hierarchical), per-GPU layer work under TP/PP/CP/EP, Korthikanti activation
memory, and the smooth primitives every discrete step goes through.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
from costmodel._src.ops import collectives
from costmodel._src.ops import efficiency as eff_lib
from costmodel._src.ops import layers
from costmodel._src.ops import roofline
from costmodel._src.ops import smooth
from costmodel._src.specs.model import ModelSpec

GIB = 2.0**30

# A made-up accelerator with round figures, so every expected time below can
# be written out by hand.
ROUND_HW = cm.Hardware(
    name="round", peak_flops_per_s=1e15, peak_fp8_flops_per_s=2e15, hbm_bytes=80 * GIB,
    hbm_bandwidth_bytes_per_s=1e12, scaleup_bandwidth_bytes_per_s=100e9,
    scaleup_latency_s=1e-5, scaleout_bandwidth_bytes_per_s=10e9, scaleout_latency_s=2e-5,
    host_bandwidth_bytes_per_s=50e9, matmul_efficiency_max=0.8, hbm_efficiency_max=0.9,
    scaleup_efficiency=0.5, scaleout_efficiency=0.8)
# Half efficiency at 64 GEMM rows and at a 1 us ideal transfer, exponent 1.
# The decode tile equal to the half point keeps the plain row curve
# 1 / (1 + 64 / M) (the tile mechanism has a test of its own).
ROUND_EFF = cm.Efficiency(matmul_half_rows=64.0, matmul_exponent=1.0,
                          memory_half_time_s=1e-6, memory_exponent=1.0,
                          matmul_tile_rows=64.0)
BU = 100e9 * 0.5  # achieved scale-up bandwidth, bytes/s
BO = 10e9 * 0.8  # achieved scale-out bandwidth, bytes/s
AU, AO = 1e-5, 2e-5  # per-step latencies, s

# ----- efficiency curve and roofline ----------------------------------------


@pytest.mark.parametrize("size,half,k,expected", [
    (64.0, 64.0, 1.0, 0.8 / 2),           # at the half point: half of eff_max
    (192.0, 64.0, 1.0, 0.8 / (1 + 1 / 3)),  # 0.6
    (32.0, 64.0, 2.0, 0.8 / (1 + 4)),      # 0.16: steeper curve below the half point
    (256.0, 64.0, 2.0, 0.8 / (1 + 1 / 16)),
    (1e9, 64.0, 1.0, 0.8 / (1 + 64e-9)),   # saturates at eff_max
])
def test_saturating_efficiency_at_chosen_points(size, half, k, expected):
  got = eff_lib.saturating_efficiency(size, 0.8, half, k)
  assert float(got) == pytest.approx(expected, rel=1e-6)


def test_saturating_efficiency_is_zero_with_finite_gradient_at_zero_size():
  f = lambda x: eff_lib.saturating_efficiency(x, 0.8, 64.0, 1.0)
  assert float(f(0.0)) == pytest.approx(0.0, abs=1e-20)
  assert np.isfinite(float(jax.grad(f)(0.0)))


def test_roofline_compute_bound_hand_derived():
  # 2 TFLOP in GEMMs of 192 rows: efficiency 0.8 / (1 + 64/192) = 0.6.
  flops, rows = 2e12, 192.0
  t_c = flops / (1e15 * 0.6)  # 3.333 ms
  # 1 MB in one transfer: ideal 1 us, efficiency 0.9 / (1 + 1) = 0.45.
  t_m = 1e6 / 1e12 / 0.45
  rt = roofline.roofline(flops, 1e6, rows, ROUND_HW, ROUND_EFF)
  assert float(rt.time_s) == pytest.approx(t_c, rel=1e-6)
  assert t_c > 1000 * t_m
  assert float(rt.compute_s) == pytest.approx(t_c, rel=1e-5)
  assert float(rt.memory_s) == pytest.approx(0.0, abs=1e-6 * t_c)


def test_roofline_memory_bound_hand_derived():
  # 3 GB in 3,000 transfers of 1 MB: each at 0.45 efficiency.
  nbytes, n_ops = 3e9, 3000.0
  t_m = nbytes / 1e12 / 0.45  # 6.667 ms
  # 1 MFLOP at 64 rows: 0.4 efficiency, 2.5 ns.
  t_c = 1e6 / (1e15 * 0.4)
  rt = roofline.roofline(1e6, nbytes, 64.0, ROUND_HW, ROUND_EFF, n_ops=n_ops)
  assert float(rt.time_s) == pytest.approx(t_m, rel=1e-6)
  assert float(rt.memory_s) == pytest.approx(t_m, rel=1e-5)
  assert float(rt.compute_s) < 1e-5 * t_m
  # One big transfer instead: ideal 3 ms, efficiency 0.9 / (1 + 1e-6 / 3e-3).
  rt1 = roofline.roofline(1e6, nbytes, 64.0, ROUND_HW, ROUND_EFF, n_ops=1.0)
  assert float(rt1.time_s) == pytest.approx(3e-3 * (1 + 1e-6 / 3e-3) / 0.9, rel=1e-6)
  assert float(rt.time_s) == pytest.approx(t_c + t_m, rel=1e-6)  # t_c is negligible


def test_roofline_peak_scale_and_hardware_figures():
  rt = roofline.roofline(2e12, 1.0, 192.0, ROUND_HW, ROUND_EFF, peak_scale=0.5)
  assert float(rt.time_s) == pytest.approx(2e12 / (0.5e15 * 0.6), rel=1e-6)
  faster = ROUND_HW.replace(peak_flops_per_s=2e15)
  assert float(roofline.roofline(2e12, 1.0, 192.0, faster, ROUND_EFF).time_s) == (
      pytest.approx(2e12 / (2e15 * 0.6), rel=1e-6))


@pytest.mark.parametrize("tau", [0.0, 0.1])
def test_roofline_of_no_work_is_zero_with_finite_gradients(tau):
  # Zero bytes (a masked-out branch, an empty transfer) must not poison
  # gradients: the efficiency of an empty transfer underflows in float32.
  assert float(roofline.memory_time(0.0, ROUND_HW, ROUND_EFF, 28.0)) == 0.0
  grads = jax.grad(lambda b, n: roofline.memory_time(b, ROUND_HW, ROUND_EFF, n),
                   argnums=(0, 1))(0.0, 28.0)
  assert all(np.isfinite(float(g)) for g in grads)
  f = lambda fl, b, r: roofline.roofline(fl, b, r, ROUND_HW, ROUND_EFF, n_ops=4.0, tau=tau).time_s
  assert float(f(0.0, 0.0, 128.0)) == pytest.approx(0.0, abs=1e-20)
  grads = jax.grad(f, argnums=(0, 1, 2))(0.0, 0.0, 128.0)
  assert all(np.isfinite(float(g)) for g in grads)


@pytest.mark.parametrize("tau", [0.0, 0.05, 0.3])
@pytest.mark.parametrize("flops,nbytes", [(2e12, 1e6), (1e6, 3e9), (4e11, 2.2e8), (0.0, 0.0),
                                          (0.0, 1e6), (1e9, 0.0)])
def test_roofline_split_sums_to_total(tau, flops, nbytes):
  rt = roofline.roofline(flops, nbytes, 128.0, ROUND_HW, ROUND_EFF, tau=tau)
  assert float(rt.compute_s) >= 0 and float(rt.memory_s) >= 0
  assert float(rt.compute_s + rt.memory_s) == pytest.approx(float(rt.time_s), rel=1e-6,
                                                            abs=1e-30)


@pytest.mark.parametrize("tau", [0.05, 0.2, 0.5])
def test_relaxed_roofline_is_the_p_norm_of_the_two_bounds(tau):
  t_c = 4e11 / (1e15 * 0.8 / (1 + 64 / 128))
  t_m = 2.2e8 / 1e12 / (0.9 / (1 + 1e-6 / 2.2e-4))
  rt = roofline.roofline(4e11, 2.2e8, 128.0, ROUND_HW, ROUND_EFF, tau=tau)
  p = 1.0 / tau
  expected = (t_c**p + t_m**p) ** tau
  assert float(rt.time_s) == pytest.approx(expected, rel=1e-5)
  assert max(t_c, t_m) * (1 - 1e-6) <= float(rt.time_s) <= 2**tau * max(t_c, t_m) * (1 + 1e-6)


# ----- collectives -----------------------------------------------------------


def _ct(kind, nbytes, n, domain=8, hw=ROUND_HW, eff=ROUND_EFF, tau=0.0):
  return float(collectives.collective_time(kind, nbytes, n, domain, hw, eff, tau))


S = 64e6  # 64 MB buffer


@pytest.mark.parametrize("n", [2, 4, 8])
def test_collectives_inside_one_domain(n):
  # The alpha-beta formulas of Thakur, Rabenseifner & Gropp (2005), ring.
  assert _ct("all_reduce", S, n) == pytest.approx(
      2 * (n - 1) * AU + 2 * (n - 1) / n * S / BU, rel=1e-6)
  assert _ct("all_gather", S, n) == pytest.approx((n - 1) * AU + (n - 1) / n * S / BU, rel=1e-6)
  assert _ct("reduce_scatter", S, n) == pytest.approx(
      (n - 1) * AU + (n - 1) / n * S / BU, rel=1e-6)
  assert _ct("all_to_all", S, n) == pytest.approx((n - 1) * AU + (n - 1) / n * S / BU, rel=1e-6)
  assert _ct("broadcast", S, n) == pytest.approx((n - 1) * AU + S / BU, rel=1e-6)
  assert _ct("p2p", S, n) == pytest.approx(AU + S / BU, rel=1e-6)


@pytest.mark.parametrize("n,domain", [(16, 8), (32, 8), (64, 4)])
def test_hierarchical_collectives_across_domains(n, domain):
  k, big_n = domain, n // domain
  # All-reduce: intra reduce-scatter + inter all-reduce of S/k + intra all-gather.
  ar = (2 * ((k - 1) * AU + (k - 1) / k * S / BU)
        + 2 * (big_n - 1) * AO + 2 * (big_n - 1) / big_n * (S / k) / BO)
  assert _ct("all_reduce", S, n, domain) == pytest.approx(ar, rel=1e-6)
  # All-gather / reduce-scatter: intra part on S, inter part on S/k.
  ag = (k - 1) * AU + (k - 1) / k * S / BU + (big_n - 1) * AO + (big_n - 1) / big_n * (S / k) / BO
  assert _ct("all_gather", S, n, domain) == pytest.approx(ag, rel=1e-6)
  assert _ct("reduce_scatter", S, n, domain) == pytest.approx(ag, rel=1e-6)
  # All-to-all: (n - k)/n of the bytes cross the NICs, the rest stays inside;
  # the two links work in parallel.
  a2a = (k - 1) * AU + (n - k) * AO + max((k - 1) / n * S / BU, (n - k) / n * S / BO)
  assert _ct("all_to_all", S, n, domain) == pytest.approx(a2a, rel=1e-6)
  # Broadcast: a pipelined chain inside each domain and across domains.
  bc = (k - 1) * AU + S / BU + (big_n - 1) * AO + S / BO
  assert _ct("broadcast", S, n, domain) == pytest.approx(bc, rel=1e-6)
  # A pair that does not fit in one domain goes over the NIC.
  assert _ct("p2p", S, 2, domain=1) == pytest.approx(AO + S / BO, rel=1e-6)


@pytest.mark.parametrize("kind", collectives.KINDS)
@pytest.mark.parametrize("tau", [0.0, 0.1])
def test_group_of_one_costs_nothing(kind, tau):
  # (the relaxed all-to-all keeps the p-norm of two zeros, ~1e-30 s)
  assert _ct(kind, S, 1, tau=tau) == pytest.approx(0.0, abs=1e-20)
  assert _ct(kind, S, 1, domain=1, tau=tau) == pytest.approx(0.0, abs=1e-20)
  assert float(collectives.flat_time(kind, S, 1.0, BU, AU)) == 0.0


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_nccl_bus_factors(n):
  # nccl-tests doc/PERFORMANCE.md: busbw = algbw * f.
  assert float(collectives.bus_factor("all_reduce", n)) == pytest.approx(2 * (n - 1) / n)
  for kind in ("all_gather", "reduce_scatter", "all_to_all"):
    assert float(collectives.bus_factor(kind, n)) == pytest.approx((n - 1) / n)
  for kind in ("broadcast", "p2p"):
    assert float(collectives.bus_factor(kind, n)) == 1.0


def test_unknown_collective_kind_is_rejected():
  with pytest.raises(ValueError, match=r"kind='gather'.*all_reduce"):
    collectives.collective_time("gather", S, 8, 8, ROUND_HW, ROUND_EFF)
  with pytest.raises(ValueError, match=r"kind='scatter'"):
    collectives.bus_factor("scatter", 8)


def test_link_efficiency_scales_the_bandwidth_term_only():
  slow = dataclasses.replace(ROUND_EFF, link_efficiency=0.5)
  n = 8
  assert _ct("all_reduce", S, n, eff=slow) == pytest.approx(
      2 * (n - 1) * AU + 2 * (n - 1) / n * S / (0.5 * BU), rel=1e-6)


def test_collective_time_is_smooth_in_a_real_group_size():
  # Inside a domain the flat formula holds for real n too (relaxed search).
  n = 5.5
  assert _ct("all_reduce", S, n, tau=0.0) == pytest.approx(
      2 * (n - 1) * AU + 2 * (n - 1) / n * S / BU, rel=1e-6)
  # Relaxed and exact agree at integers well inside the domain.
  assert _ct("all_gather", S, 2, domain=64, tau=0.05) == pytest.approx(
      _ct("all_gather", S, 2, domain=64), rel=1e-3)


# ----- layer work -------------------------------------------------------------


def test_forward_work_dense_under_tp_cp(tiny_dense):
  h, a, kv, d, ffn, vocab = 256, 8, 2, 32, 1024, 1000
  attention = h * a * d + 2 * h * kv * d + a * d * h  # q, k + v, o: 163,840
  per_layer = attention + 2 * h + 3 * h * ffn  # + 2 RMSNorms + SwiGLU: 950,784
  layers_all = 4 * per_layer  # 3,803,136
  head = vocab * h  # 256,000
  assert tiny_dense.layer_params(active=True) == layers_all == 3_803_136
  tokens, ctx, tp, cp = 1024.0, 512.0, 2.0, 2.0
  t_loc = tokens / cp  # 512
  w = layers.forward_work(tiny_dense, tokens, ctx, tp=tp, cp=cp)
  assert float(w.matmul_flops) == pytest.approx(2 * t_loc * (layers_all + head) / tp)
  assert float(w.matmul_flops) == pytest.approx(2_078_277_632)
  # Scores and values: 2 a (d_qk + d_v) ctx per token per layer, 4 layers.
  attn = 4 * 2 * a * (d + d) * ctx * t_loc / tp
  assert float(w.attention_flops) == pytest.approx(attn) and attn == 536_870_912
  assert float(w.weight_bytes) == pytest.approx(2 * (layers_all + head) / tp)
  # Element-wise: 16 h / tp (SP) + 3 ffn / tp per token per layer; logits
  # 2 V / tp per token.
  act = 2 * t_loc * 4 * (16 * h / tp + 3 * ffn / tp) + 2 * 2 * t_loc * vocab / tp
  assert float(w.activation_bytes) == pytest.approx(act) and act == 15_704_064
  assert float(w.tp_bytes) == 2 * t_loc * h
  assert float(w.tp_collectives) == 2 * 4  # two all-reduces per layer
  assert float(w.ep_bytes) == 0 and float(w.ep_collectives) == 0
  # CP ring: the local K and V (2 kv d per token), split over min(tp, kv) ranks.
  assert float(w.cp_bytes) == pytest.approx(2 * t_loc * 2 * kv * d / min(tp, kv))
  assert float(w.n_gemms) == 4 * (4 + 3) + 1
  assert float(w.layers) == 4 and float(w.rows) == t_loc
  # TP beyond the KV heads replicates them: the ring carries 1/kv, not 1/tp.
  w8 = layers.forward_work(tiny_dense, tokens, ctx, tp=8.0, cp=cp)
  assert float(w8.cp_bytes) == pytest.approx(2 * t_loc * 2 * kv * d / kv)
  # No TP, no all-reduce.
  assert float(layers.forward_work(tiny_dense, tokens, ctx, cp=cp).tp_collectives) == 0


def test_forward_work_lm_head_sits_whole_on_the_last_stage(tiny_dense):
  # The stage modelled is the last one: its share of the layers plus the
  # whole LM head (the slowest stage sets a pipeline's pace).
  tokens, ctx, tp, pp = 512.0, 256.0, 2.0, 2.0
  w = layers.forward_work(tiny_dense, tokens, ctx, tp=tp, pp=pp)
  layers_all, head = 3_803_136, 1000 * 256
  assert float(w.matmul_flops) == pytest.approx(2 * tokens * (layers_all / pp + head) / tp)
  assert float(w.weight_bytes) == pytest.approx(2 * (layers_all / pp + head) / tp)
  # Logits: 2 V elements per token read and written, on the last stage only.
  no_head = layers.forward_work(tiny_dense, tokens, ctx, tp=tp, pp=pp, lm_head=False)
  assert float(w.activation_bytes - no_head.activation_bytes) == pytest.approx(
      2 * 2 * tokens * 1000 / tp)


def test_forward_work_pipeline_stage_holds_its_share_of_the_layers(tiny_dense):
  tokens, ctx = 1024.0, 512.0
  one = layers.forward_work(tiny_dense, tokens, ctx, tp=2.0, lm_head=False)
  two = layers.forward_work(tiny_dense, tokens, ctx, tp=2.0, pp=2.0, lm_head=False)
  for field in ("matmul_flops", "attention_flops", "weight_bytes", "activation_bytes",
                "tp_collectives", "layers"):
    assert float(getattr(two, field)) == pytest.approx(float(getattr(one, field)) / 2), field
  assert float(two.n_gemms) == 2 * 7
  assert float(two.rows) == float(one.rows) == tokens


def test_forward_work_without_flash_attention_or_sp(tiny_dense):
  tokens, ctx, tp = 256.0, 128.0, 2.0
  base = layers.forward_work(tiny_dense, tokens, ctx, tp=tp)
  w = layers.forward_work(tiny_dense, tokens, ctx, tp=tp, flash_attention=False,
                          sequence_parallel=False)
  # The full score matrix: twice the causal attention FLOPs.
  assert float(w.attention_flops) == pytest.approx(2 * float(base.attention_flops))
  # Each rank repeats the norms (16 h instead of 16 h / tp) and the unfused
  # softmax reads and writes 6 a / tp scores per key.
  extra = 2 * tokens * 4 * (16 * 256 * (1 - 1 / tp) + 6 * 8 / tp * 2 * ctx)
  assert float(w.activation_bytes - base.activation_bytes) == pytest.approx(extra)
  assert float(w.matmul_flops) == float(base.matmul_flops)


def test_forward_work_moe_under_tp_ep(tiny_moe):
  h, e_ffn, n_exp, top_k = 256, 128, 8, 2
  attention = 4 * h * h  # MHA: q, k, v, o each h x h
  expert = 3 * h * e_ffn  # 98,304
  dense_layer = attention + 2 * h + 3 * h * 1024
  moe_layer_active = attention + 2 * h + h * n_exp + top_k * expert
  layers_active = dense_layer + 3 * moe_layer_active  # 2,433,024
  experts_all = 3 * n_exp * expert  # 2,359,296
  dense_weights = layers_active - 3 * top_k * expert  # 1,843,200
  head = 1000 * h
  assert tiny_moe.layer_params(active=True) == layers_active == 2_433_024
  tokens, tp, ep = 2.0, 2.0, 2.0
  w = layers.forward_work(tiny_moe, tokens, 64.0, tp=tp, ep=ep)
  assert float(w.matmul_flops) == pytest.approx(2 * tokens * (layers_active + head) / tp)
  # 4 routed tokens (2 per rank, 2 ranks) touch 1 - (1 - 2/8)^4 of the experts.
  touched = 1 - 0.75**4
  assert float(layers.experts_touched_fraction(tiny_moe, tokens * ep)) == pytest.approx(touched)
  # Experts under EP with expert-TP 1 (the default since the ETP option):
  # each expert whole on its rank, so experts / ep (was experts / (tp ep)).
  assert float(w.weight_bytes) == pytest.approx(
      2 * (dense_weights / tp + touched * experts_all / ep + head / tp), rel=1e-6)
  # veRL's Megatron default, ETP = TP, splits them over tp * ep again.
  w_etp = layers.forward_work(tiny_moe, tokens, 64.0, tp=tp, ep=ep, etp=tp)
  assert float(w_etp.weight_bytes) == pytest.approx(
      2 * (dense_weights / tp + touched * experts_all / (tp * ep) + head / tp), rel=1e-6)
  # Dispatch and combine per MoE layer (3 of 4), each top_k h per token of
  # the rank's SP share (tokens / tp; was all tokens before SP was counted).
  assert float(w.ep_bytes) == 2 * tokens / tp * top_k * h
  assert float(w.ep_collectives) == 2 * 3
  # The MoE layers' MLP all-reduce gives way to the all-to-alls: 2 per
  # layer minus one per MoE layer under EP.
  assert float(w.tp_collectives) == 2 * 4 - 3
  # Mean active MLP width over the layers: (1024 + 3 * 2 * 128) / 4 = 448;
  # the MoE layers (3 of 4) also permute the routed copies into expert order
  # and back: 4 k h elements per token (added with the MoE dispatch model).
  act = 2 * tokens * 4 * (16 * h / tp + 3 * 448 / tp + 0.75 * 4 * top_k * h / tp) + \
      2 * 2 * tokens * 1000 / tp
  assert float(w.activation_bytes) == pytest.approx(act)
  # Without EP, no all-to-all; with many tokens every expert is read.
  w1 = layers.forward_work(tiny_moe, 4096.0, 64.0, tp=tp, ep=1.0)
  assert float(w1.ep_collectives) == 0
  assert float(w1.weight_bytes) == pytest.approx(2 * (dense_weights + experts_all + head) / tp,
                                                 rel=1e-6)


def test_forward_work_moe_under_cp(tiny_moe):
  w = layers.forward_work(tiny_moe, 4096.0, 1024.0, tp=1.0, cp=4.0, ep=4.0)
  assert float(w.rows) == 1024
  assert float(w.matmul_flops) == pytest.approx(
      2 * 1024 * (tiny_moe.layer_params(active=True) + 1000 * 256))
  # MHA with 8 KV heads at tp 1: the whole local K and V go round the ring.
  assert float(w.cp_bytes) == pytest.approx(2 * 1024 * 2 * 8 * 32)


def test_dense_model_touches_all_experts(tiny_dense):
  assert float(layers.experts_touched_fraction(tiny_dense, 1.0)) == 1.0


@pytest.mark.parametrize("name", cm.models.names())
def test_forward_work_matches_model_flops_per_token(name):
  # With one GPU, matmul + attention FLOPs are the model's forward FLOPs per
  # token times tokens (LM head of the right width included).
  spec = cm.models.get(name)
  w = layers.forward_work(spec, 1000.0, 300.0)
  expected = spec.forward_flops_per_token(300.0) * 1000.0
  assert float(w.matmul_flops + w.attention_flops) == pytest.approx(expected, rel=1e-5)


# ----- activation memory (Korthikanti et al., MLSys'23, Table 2) -------------

# GPT-22B of Korthikanti et al. Table 3: 48 layers, h 6144, a 64, s 2048, b 4,
# t 8, GELU MLP of width 4h.
GPT_22B = ModelSpec("gpt-22b", n_layers=48, hidden=6144, n_heads=64, n_kv_heads=64,
                    head_dim=96, ffn_hidden=4 * 6144, vocab=51200, gated_mlp=False)


def _act(model, recompute, sp, flash=False, s=2048, b=4, t=8, cp=1):
  per_layer = layers.activation_bytes_per_layer(model, s, b, t, cp, recompute,
                                                sequence_parallel=sp, flash_attention=flash)
  return float(per_layer) * model.n_layers


def test_gpt22b_activation_memory_published_cases():
  assert _act(GPT_22B, 0, sp=False) / GIB == pytest.approx(59.25, rel=1e-6)
  assert _act(GPT_22B, 1, sp=True) / GIB == pytest.approx(9.5625, rel=1e-6)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_formulas_per_layer(t):
  s, b, h, a = 2048, 4, 6144, 64
  sbh = s * b * h
  cases = {
      (0, False): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
      (0, True): sbh * (34 + 5 * a * s / h) / t,
      (1, False): sbh * (10 + 24 / t),
      (1, True): 34 * sbh / t,
      (2, False): 2 * sbh,
      (2, True): 2 * sbh / t,
  }
  for (recompute, sp), expected in cases.items():
    assert _act(GPT_22B, recompute, sp, t=t) / 48 == pytest.approx(expected, rel=1e-6), (
        recompute, sp)


def test_activation_memory_flash_attention_cp_and_traced_recompute():
  s, b, h, t = 2048, 4, 6144, 8
  # FlashAttention drops the 5 a s^2 b score term: as selective recompute.
  assert _act(GPT_22B, 0, sp=True, flash=True) == pytest.approx(_act(GPT_22B, 1, sp=True))
  # CP divides the sequence.
  assert _act(GPT_22B, 1, sp=True, cp=4) == pytest.approx(34 * s / 4 * b * h / t * 48)
  # The recompute mode may be a traced value.
  f = jax.jit(lambda r: layers.activation_bytes_per_layer(GPT_22B, s, b, t, 1, r, True, False))
  for r in (0, 1, 2):
    assert float(f(jnp.asarray(r))) == pytest.approx(_act(GPT_22B, r, sp=True) / 48, rel=1e-6)


def test_activation_memory_mlp_share_follows_ffn_width_and_gating():
  s, b, h, t = 1024, 1, 4096, 1
  sbh = s * b * h
  gelu = ModelSpec("g", n_layers=1, hidden=h, n_heads=32, n_kv_heads=32, head_dim=128,
                   ffn_hidden=2 * h, vocab=1000, gated_mlp=False)
  # 15 sbh outside the MLP; the MLP's 19 sbh at ffn = 4h halves at ffn = 2h.
  assert _act(gelu, 1, sp=True, s=s, b=b, t=t) == pytest.approx(sbh * (15 + 19 / 2))
  swiglu = gelu.replace(name="s", gated_mlp=True)
  assert _act(swiglu, 1, sp=True, s=s, b=b, t=t) == pytest.approx(sbh * (15 + 19 * 1.5 / 2))
  # An MoE model whose routed MLP (top-1, one expert's width) equals the dense
  # MLP stores the same activations.
  moe = swiglu.replace(name="m", n_experts=4, top_k=1, expert_ffn_hidden=2 * h)
  assert _act(moe, 1, sp=True, s=s, b=b, t=t) == pytest.approx(_act(swiglu, 1, sp=True, s=s,
                                                                    b=b, t=t))
  # Top-2 routing stores two copies of the expert activations.
  moe2 = moe.replace(name="m2", top_k=2, expert_ffn_hidden=h)
  assert _act(moe2, 1, sp=True, s=s, b=b, t=t) == pytest.approx(_act(swiglu, 1, sp=True, s=s,
                                                                     b=b, t=t))


# ----- smooth primitives ------------------------------------------------------

PAIRS = [(3.0, 5.0), (5.0, 3.0), (2.0, 2.0), (0.0, 4.0), (1e-3, 1e3), (7.0, 0.0)]


@pytest.mark.parametrize("a,b", PAIRS)
def test_smooth_max_min_exact_at_tau_zero(a, b):
  f32 = lambda v: float(np.float32(v))
  assert float(smooth.smax(a, b, 0.0)) == f32(max(a, b))
  assert float(smooth.smin(a, b, 0.0)) == f32(min(a, b))
  assert float(smooth.smax_n(jnp.array([a, b, 1.5]), 0.0)) == f32(max(a, b, 1.5))


@pytest.mark.parametrize("tau", [0.01, 0.1, 0.5])
@pytest.mark.parametrize("a,b", [p for p in PAIRS if min(p) > 0])
def test_smooth_max_min_within_documented_bounds(a, b, tau):
  # smax: max <= (a^p + b^p)^(1/p) <= 2^tau max; smin mirrors it.
  hi = float(smooth.smax(a, b, tau))
  lo = float(smooth.smin(a, b, tau))
  rel = 1e-6
  assert max(a, b) * (1 - rel) <= hi <= 2**tau * max(a, b) * (1 + rel)
  assert 2**-tau * min(a, b) * (1 - rel) <= lo <= min(a, b) * (1 + rel)
  xs = jnp.array([a, b, 1.5])
  assert max(a, b, 1.5) * (1 - rel) <= float(smooth.smax_n(xs, tau)) <= (
      3**tau * max(a, b, 1.5) * (1 + rel))
  if a == b:  # at a tie the bound is attained
    assert hi == pytest.approx(2**tau * a, rel=1e-5)
    assert lo == pytest.approx(2**-tau * a, rel=1e-5)


def test_smooth_max_approaches_max_as_tau_shrinks():
  gaps = [float(smooth.smax(3.0, 4.0, t)) - 4.0 for t in (0.5, 0.2, 0.05)]
  assert gaps[0] > gaps[1] > gaps[2] > 0
  assert gaps[2] < 1e-3


@pytest.mark.parametrize("x", [-2.0, -1e-3, 0.0, 1e-3, 2.0])
def test_smooth_relu(x):
  scale = 4.0
  assert float(smooth.relu(x, scale, 0.0)) == float(np.float32(max(x, 0.0)))
  for tau in (0.01, 0.1):
    w = tau * scale
    got = float(smooth.relu(x, scale, tau))
    # softplus of width w: relu(x) <= . <= relu(x) + w log 2
    assert max(x, 0.0) - 1e-7 <= got <= max(x, 0.0) + w * math.log(2) + 1e-7
    assert got == pytest.approx(w * math.log1p(math.exp(x / w)), rel=1e-5)


@pytest.mark.parametrize("x", [0.3, 1.0, 1.5, 2.0, 7.25, 64.0])
def test_smooth_ceil(x):
  assert float(smooth.ceil(x, 0.0)) == math.ceil(x)
  # Relaxed: max(x, 1) smoothed (rounding is left to the search), within 2^tau.
  for tau in (0.01, 0.1):
    got = float(smooth.ceil(x, tau))
    assert max(x, 1.0) * (1 - 1e-6) <= got <= 2**tau * max(x, 1.0) * (1 + 1e-6)
  assert float(smooth.at_least_one(x, 0.0)) == max(x, 1.0)


@pytest.mark.parametrize("tau", [0.0, 0.1])
@pytest.mark.parametrize("a,b", [(0.0, 0.0), (0.0, 3.0), (2.0, 2.0), (3.0, 0.0)])
def test_smooth_gradients_finite_at_zero_and_ties(a, b, tau):
  for fn in (smooth.smax, smooth.smin):
    ga, gb = jax.grad(lambda x, y: fn(x, y, tau), argnums=(0, 1))(a, b)
    assert np.isfinite(float(ga)) and np.isfinite(float(gb)), fn.__name__
  g = jax.grad(lambda x: smooth.smax_n(x, tau))(jnp.array([a, b]))
  assert np.all(np.isfinite(np.asarray(g)))
  assert np.isfinite(float(jax.grad(lambda x: smooth.relu(x, 2.0, tau))(a - b)))
  assert np.isfinite(float(jax.grad(lambda x: smooth.ceil(x, tau))(a + 1.0)))
  assert np.isfinite(float(jax.grad(lambda d: smooth.safe_div(1.0, d))(a)))
  assert np.isfinite(float(jax.grad(smooth.safe_log)(a)))


def test_smooth_max_gradient_splits_at_a_tie():
  # At a tie the surrogate's gradient is 2^(tau - 1) on each side (finite,
  # symmetric); away from it the larger argument takes almost all of it.
  ga, gb = jax.grad(lambda x, y: smooth.smax(x, y, 0.1), argnums=(0, 1))(2.0, 2.0)
  assert float(ga) == pytest.approx(float(gb))
  assert float(ga) == pytest.approx(2**(0.1 - 1), rel=1e-5)
  ga, gb = jax.grad(lambda x, y: smooth.smax(x, y, 0.1), argnums=(0, 1))(1.0, 4.0)
  assert float(gb) > 0.99 and 0 <= float(ga) < 1e-5


def test_safe_div_is_zero_over_zero():
  assert float(smooth.safe_div(3.0, 0.0)) == 0.0
  assert float(smooth.safe_div(3.0, 2.0)) == 1.5


_SMOOTH_CASES = (
    ("smax", lambda t: smooth.smax(jnp.float32(3.0), jnp.float32(2.5), t)),
    ("smax_n", lambda t: smooth.smax_n(jnp.array([0.5, 3.0, 2.0]), t)),
    ("smin", lambda t: smooth.smin(jnp.float32(3.0), jnp.float32(2.5), t)),
    ("relu", lambda t: smooth.relu(jnp.float32(-0.2), 1.0, t)),
    ("relu_flat", lambda t: smooth.relu_flat(jnp.float32(0.3), 2.0, t)),
    ("ceil", lambda t: smooth.ceil(jnp.float32(2.2), t)),
)


@pytest.mark.parametrize("name,f", _SMOOTH_CASES)
def test_a_known_tau_traces_one_branch_with_the_same_value_and_gradient(name, f):

  def promised(t):
    with cmi.positive_tau():
      return f(t)

  def n_eqns(jaxpr):  # the equations, with those of lax.cond's branches
    return sum(1 + sum(n_eqns(b.jaxpr) for b in e.params.get("branches", ()))
               for e in jaxpr.eqns)

  n_both = n_eqns(jax.make_jaxpr(f)(0.1).jaxpr)  # a traced tau: both branches, lax.cond
  n_soft = n_eqns(jax.make_jaxpr(promised)(0.1).jaxpr)
  assert n_soft < n_both, name
  both, soft_only = jax.jit(f), jax.jit(promised)
  for t in (0.05, 0.3):
    assert float(soft_only(t)) == float(both(t)), name
    # float32: the branch compiled as one program (lax.cond) rounds apart
    assert float(jax.grad(promised)(t)) == pytest.approx(float(jax.grad(f)(t)), rel=2e-5,
                                                         abs=1e-5), name
    assert float(f(t)) == float(both(t)), name  # a concrete positive tau
  assert float(f(0.0)) == float(both(0.0)), name  # a concrete zero: the exact branch
  assert len(jax.make_jaxpr(lambda: f(0.0))().eqns) < n_both, name


def test_known_positive():
  assert smooth.known_positive(0.0) is False
  assert smooth.known_positive(np.float32(0.2)) is True
  assert smooth.known_positive(jnp.ones(3)) is None  # an array keeps jnp.where's broadcast
  seen = []

  def promised(t):
    with cmi.positive_tau():
      seen.append(smooth.known_positive(t))
    return t

  jax.jit(lambda t: seen.append(smooth.known_positive(t)) or t)(0.5)
  jax.jit(promised)(0.5)
  assert seen == [None, True]
