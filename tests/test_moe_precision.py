"""MoE compute, expert communication, DP-attention engines, GEMM shape and precision.

Each mechanism against a hand-derived value or a property it must have:
grouped expert GEMMs run at the tokens each expert receives; narrow GEMMs
run below wide ones; FP8 halves weight bytes and lifts the compute ceiling
by its own plateau; an overlapped all-to-all hides no more than there is
compute to hide it; DP-attention multiplies an MLA engine's KV capacity by
about its TP degree; gradients of the new parameters are finite at tau > 0.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.ops import efficiency as eff_lib
from costmodel._src.ops import layers
from costmodel._src.ops import moe as moe_lib
from costmodel._src.ops import roofline
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import sync as sync_lib
from costmodel._src.stages import train as train_lib

EFF = cm.Efficiency()
H100 = cm.hardware.get("H100")


def _moe(n_experts, top_k, expert_ffn, name="moe"):
  return ModelSpec(name, n_layers=4, hidden=1024, n_heads=8, n_kv_heads=8, head_dim=128,
                   ffn_hidden=4096, vocab=1000, n_experts=n_experts, top_k=top_k,
                   expert_ffn_hidden=expert_ffn)


def _mla(name="tiny-mla"):
  return ModelSpec(name, n_layers=4, hidden=512, n_heads=8, n_kv_heads=8, head_dim=64,
                   ffn_hidden=1024, vocab=1000, n_experts=16, top_k=2, expert_ffn_hidden=256,
                   kv_lora_rank=256, qk_rope_head_dim=32, v_head_dim=64)


def _expert_flops_per_s(model, tokens, ep=1.0):
  w = layers.forward_work(model, tokens, 512.0, ep=ep)
  t = sum(roofline.compute_time(g.flops, g.rows, H100, EFF, n=g.n, k=g.k)
          for g in w.expert_gemms)
  return sum(float(g.flops) for g in w.expert_gemms) / float(t), w


# ----- MoE compute -------------------------------------------------------------


def test_expert_rows_are_tokens_times_top_k_over_experts():
  # 4,096 tokens, top-2 of 8 experts, EP 4 (expert-TP 1, TP 1): each expert
  # gets 4,096 * 2 * 4 / 8 = 4,096 rows; with TP 2 (SP) half as many.
  m = _moe(8, 2, 512)
  assert float(layers.expert_rows(m, 4096.0, ep=4.0)) == 4096.0
  assert float(layers.expert_rows(m, 4096.0, tp=2.0, ep=4.0)) == 2048.0
  w = layers.forward_work(m, 4096.0, 512.0, ep=4.0)
  assert all(float(g.rows) == pytest.approx(4096.0, rel=1e-6) for g in w.expert_gemms)
  # The routed experts' FLOPs are the active ones: 2 t k (3 h f) per MoE layer.
  routed = sum(float(g.flops) for g in w.expert_gemms)
  assert routed == pytest.approx(2 * 4096 * 4 * 2 * 3 * 1024 * 512)


def test_more_experts_at_same_active_params_lower_expert_gemm_efficiency():
  few, many = _moe(8, 2, 512, "few"), _moe(64, 2, 512, "many")
  # Same active expert parameters per token (the routers differ by h E).
  assert few.top_k * few.expert_params() == many.top_k * many.expert_params()
  rate_few, w_few = _expert_flops_per_s(few, 2048.0)
  rate_many, w_many = _expert_flops_per_s(many, 2048.0)
  # 8x the experts: each receives 8x fewer tokens (512 vs 64 rows).
  assert float(w_few.expert_gemms[0].rows) == pytest.approx(512.0)
  assert float(w_many.expert_gemms[0].rows) == pytest.approx(64.0)
  assert rate_many < 0.8 * rate_few
  # Hand value: the row factors differ (padding P(M) = T + (H - T) M / (M + T)),
  # the widths are the same.
  t, h = EFF.matmul_tile_rows, EFF.matmul_half_rows
  s = lambda m: 1.0 / (1.0 + (t + (h - t) * m / (m + t)) / m)
  assert rate_many / rate_few == pytest.approx(s(64.0) / s(512.0), rel=1e-6)


def test_shared_experts_and_dense_first_layers_run_on_all_tokens():
  m = ModelSpec("shared", n_layers=4, hidden=1024, n_heads=8, n_kv_heads=8, head_dim=128,
                ffn_hidden=4096, vocab=1000, n_experts=16, top_k=2, expert_ffn_hidden=512,
                shared_ffn_hidden=1024, first_dense_layers=1)
  w = layers.forward_work(m, 1000.0, 100.0)
  dense_rows = {float(g.rows) for g in w.dense_gemms}
  assert dense_rows == {1000.0}
  # Dense MLP (1 layer, 3 h ffn) and shared experts (3 layers, 3 h 1024).
  widths = sorted(float(g.n) for g in w.dense_gemms)
  assert 2 * 4096 in widths and 2 * 1024 in widths
  total = sum(float(g.flops) for g in w.dense_gemms + w.expert_gemms)
  assert total == pytest.approx(float(w.matmul_flops), rel=1e-9)


def test_expert_tensor_parallel_splits_experts_and_adds_its_reduction():
  m = _moe(8, 2, 512)
  w1 = layers.forward_work(m, 4096.0, 512.0, tp=2.0, ep=4.0, etp=1.0)
  w2 = layers.forward_work(m, 4096.0, 512.0, tp=2.0, ep=4.0, etp=2.0)
  assert float(w2.expert_weight_bytes) == pytest.approx(float(w1.expert_weight_bytes) / 2)
  # ETP 2 doubles the rows per expert (two TP ranks' tokens) and halves N.
  assert float(w2.expert_gemms[0].rows) == pytest.approx(2 * float(w1.expert_gemms[0].rows))
  assert float(w2.expert_gemms[0].n) == pytest.approx(float(w1.expert_gemms[0].n) / 2)
  assert float(w1.etp_collectives) == 0 and float(w2.etp_collectives) == 4
  # Without EP the experts follow TP whatever etp says.
  w0 = layers.forward_work(m, 4096.0, 512.0, tp=2.0, ep=1.0, etp=1.0)
  assert float(w0.etp) == 2.0


def test_routing_imbalance_slows_expert_gemms_proportionally():
  m = _moe(8, 2, 512)
  w = layers.forward_work(m, 8192.0, 512.0, ep=4.0)
  base = common.gemm_roofline(w, H100, EFF, 3.0)
  skew = common.gemm_roofline(w, H100, dataclasses.replace(EFF, moe_imbalance=1.25), 3.0)
  exp_c = sum(roofline.compute_time(3 * g.flops, g.rows, H100, EFF, n=g.n, k=g.k)
              for g in w.expert_gemms)
  # Compute bound at 8,192 tokens: the expert part grows by 25%.
  assert float(skew.time_s - base.time_s) == pytest.approx(0.25 * float(exp_c), rel=1e-3)


# ----- GEMM shape -------------------------------------------------------------


def test_narrow_gemms_run_below_wide_ones():
  e = lambda n, k: float(eff_lib.gemm_efficiency(4096.0, 0.76, EFF, n=n, k=k))
  assert e(512.0, 8192.0) < e(2048.0, 8192.0) < e(8192.0, 8192.0)
  assert e(8192.0, 512.0) < e(8192.0, 2048.0) < e(8192.0, 8192.0)
  # Hand value at N = K = W_half: each width factor is 1/2.
  w = EFF.matmul_half_width
  t, h = EFF.matmul_tile_rows, EFF.matmul_half_rows
  m_factor = 1.0 / (1.0 + (t + (h - t) * 4096.0 / (4096.0 + t)) / 4096.0)
  assert e(w, w) == pytest.approx(0.76 * m_factor / 4, rel=1e-6)
  # Leaving N and K out is the wide limit.
  assert float(eff_lib.gemm_efficiency(4096.0, 0.76, EFF)) == pytest.approx(0.76 * m_factor)


def test_a_few_rows_pad_to_the_decode_tile_not_the_half_point():
  # One row per expert: padded to about T = 16 rows, not H = 48.
  e1 = float(eff_lib.gemm_efficiency(1.0, 1.0, EFF))
  t, h = EFF.matmul_tile_rows, EFF.matmul_half_rows
  assert e1 == pytest.approx(1.0 / (1.0 + t + (h - t) / (1.0 + t)), rel=1e-6)
  assert e1 > 2.0 / (1.0 + h)
  # Large M: the plain curve 1 / (1 + H / M) within 1%.
  e = float(eff_lib.gemm_efficiency(4096.0, 1.0, EFF))
  assert e == pytest.approx(1.0 / (1.0 + h / 4096.0), rel=1e-2)


def test_gemm_efficiency_has_finite_gradients_in_every_size():
  f = lambda x: eff_lib.gemm_efficiency(x[0], 0.76, EFF, n=x[1], k=x[2])
  g = jax.grad(f)(jnp.asarray([0.0, 64.0, 1.0]))
  assert np.all(np.isfinite(np.asarray(g)))


# ----- precision --------------------------------------------------------------


def test_fp8_halves_weight_bytes_and_lifts_the_ceiling_by_its_own_plateau():
  model = cm.models.get("qwen3-30b-a3b")
  bf16 = cm.Engine(tp=2.0)
  fp8 = cm.Engine(tp=2.0, precision=cm.Precision(weights="fp8", compute="fp8"))
  w16 = gen_lib.engine_weight_bytes(model, bf16, precision_lib.weight_bytes(bf16.precision, 2.0))
  w8 = gen_lib.engine_weight_bytes(model, fp8, precision_lib.weight_bytes(fp8.precision, 2.0))
  assert float(w8) == pytest.approx(float(w16) / 2)
  # A huge wide GEMM: the ceiling is peak * plateau; FP8's is 2x * 0.95.
  big = 1e9
  t16 = roofline.compute_time(1.0, big, H100, EFF, n=big, k=big)
  t8 = roofline.compute_time(1.0, big, H100, EFF, n=big, k=big, dtype="fp8")
  assert float(t16 / t8) == pytest.approx(
      H100.peak_fp8_flops_per_s / H100.peak_flops_per_s * EFF.fp8_matmul_efficiency, rel=1e-5)
  # FP8 plateaus later: at N = K = 1,024 its width factors are lower.
  s16 = float(eff_lib.gemm_efficiency(4096.0, 1.0, EFF, n=1024.0, k=1024.0))
  s8 = float(eff_lib.gemm_efficiency(4096.0, 1.0, EFF, n=1024.0, k=1024.0, speedup=2.0))
  assert s8 < s16


def test_fp8_training_pays_its_casts_and_speeds_up_compute_bound_steps():
  model = cm.models.get("llama-3.1-8b")
  job = cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=1.0,
                 prompt_len=1.0, response=cm.ResponseLength.from_mean_max(4095.0, 4095.0, bins=1))
  cluster = cm.Cluster(H100, 8, 1)
  bf = cm.Parallel(tp=1.0, zero_stage=1.0, recompute=0.0)
  f8 = bf.replace(precision=cm.Precision(compute="fp8"))
  c16 = train_lib.train(model, job, bf, 8.0, cluster, EFF, seq_len=4096.0, updates=1.0)
  c8 = train_lib.train(model, job, f8, 8.0, cluster, EFF, seq_len=4096.0, updates=1.0)
  assert float(c8.compute_s) < 0.75 * float(c16.compute_s)
  assert float(c8.memory_s) > float(c16.memory_s)  # the scaling casts
  assert float(c8.time_s) < float(c16.time_s)


def test_precision_rules_name_the_field():
  with pytest.raises(ValueError, match="compute='int3'"):
    cm.Precision(compute="int3")
  with pytest.raises(ValueError, match="weights='fp6'"):
    cm.Precision(weights="fp6")
  with pytest.raises(ValueError, match="peak_fp4_flops_per_s"):
    precision_lib.peak_flops(H100, "fp4")
  b200 = cm.hardware.get("B200")
  assert float(precision_lib.peak_flops(b200, "fp4")) == pytest.approx(
      2 * b200.peak_fp8_flops_per_s, rel=1e-6)


def test_weight_sync_to_an_fp8_engine_adds_the_conversion():
  model = cm.models.get("qwen3-30b-a3b")
  job = cm.RLJob("grpo", model)
  cluster = cm.Cluster(H100, 8, 2)
  layout = cm.Parallel(ep=8.0, zero_stage=1.0)
  e16 = cm.Engine(tp=2.0)
  e8 = cm.Engine(tp=2.0, precision=cm.Precision(weights="fp8", compute="fp8"))
  s16 = sync_lib.weight_sync(model, job, layout, 16.0, e16, 16.0, True, cluster, EFF)
  s8 = sync_lib.weight_sync(model, job, layout, 16.0, e8, 16.0, True, cluster, EFF)
  params = model.total_params / 2.0
  stream = params * 3.0 / (H100.hbm_bandwidth_bytes_per_s * H100.hbm_efficiency_max)
  expected = stream + model.n_tensors * EFF.convert_per_tensor_s
  assert float(s8.time_s - s16.time_s) == pytest.approx(expected, rel=1e-5)


# ----- expert-parallel communication --------------------------------------------


def test_dispatch_across_domains_sends_one_copy_per_remote_domain():
  # 16 ranks over 2 domains of 8, top-8: the remote domain is hit with
  # probability 1 - (1/2)^8; inside, 8 copies x 7/16.
  s = 1e8
  t = moe_lib.exchange_time(s, 8, 16.0, 8.0, H100, EFF)
  bu = H100.scaleup_bandwidth_bytes_per_s * H100.scaleup_efficiency
  bo = H100.scaleout_bandwidth_bytes_per_s * H100.scaleout_efficiency
  lat = 7 * H100.scaleup_latency_s + 1 * H100.scaleout_latency_s
  expected = lat + max(s * 8 * 7 / 16 / bu, s * (1 - 0.5**8) / bo)
  assert float(t) == pytest.approx(expected, rel=1e-6)
  assert float(moe_lib.exchange_time(s, 8, 1.0, 8.0, H100, EFF)) == 0.0


@pytest.mark.parametrize("overlap", [0.25, 0.5, 1.0])
def test_overlapped_all_to_all_shortens_the_pass_by_at_most_the_hidden_part(overlap):
  m = _moe(8, 2, 512)
  cluster = cm.Cluster(H100, 8, 2)
  w = layers.forward_work(m, 8192.0, 512.0, ep=16.0)
  base = common.pass_time(w, 3.0, cluster, EFF, 1.0, 1.0, 16.0, 0.0, 2.0)
  hid = common.pass_time(w, 3.0, cluster, EFF, 1.0, 1.0, 16.0, 0.0, 2.0, ep_overlap=overlap)
  ep_s = float(common.ep_time(w, cluster, EFF, 16.0, 0.0, 2.0))
  saved = float(base.comm_s - hid.comm_s)
  assert 0.0 < saved <= overlap * ep_s + 1e-12
  assert saved == pytest.approx(min(overlap * ep_s, float(base.compute_s)), rel=1e-6)
  assert float(hid.compute_s) == float(base.compute_s)


def test_parallel_rejects_bad_overlap_and_vpp():
  with pytest.raises(ValueError, match="ep_overlap=1.5"):
    cm.Parallel(ep_overlap=1.5)
  with pytest.raises(ValueError, match="vpp=2.5"):
    cm.Parallel(pp=4.0, vpp=2.5)
  with pytest.raises(ValueError, match="needs pp > 1"):
    cm.Parallel(pp=1.0, vpp=2.0)
  with pytest.raises(ValueError, match="etp=0.5"):
    cm.Parallel(etp=0.5)
  assert float(cm.Parallel(pp=4.0, vpp=3.0).vpp) == 3.0


# ----- DP-attention engines ----------------------------------------------------


def test_dp_attention_multiplies_mla_concurrency_by_about_tp():
  model = _mla()
  job = cm.RLJob("grpo", model, prompts_per_step=65536.0, samples_per_prompt=8.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(2048.0, 4096.0))
  cluster = cm.Cluster(H100, 8, 1)
  tp = cm.Engine(tp=8.0, ep=8.0, max_seqs=1e6)
  dpa = cm.Engine(tp=8.0, ep=8.0, max_seqs=1e6, dp_attention=True)
  g_tp = gen_lib.generate(model, job, tp, 8.0, cluster, EFF)
  g_dp = gen_lib.generate(model, job, dpa, 8.0, cluster, EFF)
  # Latent KV replicated over TP vs held once per DP rank: 8x the tokens,
  # less the (tiny) attention weights now replicated on every GPU.
  budget = lambda e: 0.6 * H100.hbm_bytes - gen_lib.engine_weight_bytes(
      model, e, 2.0) - gen_lib.WORKSPACE_BYTES
  ratio = float(g_dp.extras["kv_tokens"] / g_tp.extras["kv_tokens"])
  assert ratio == pytest.approx(8.0 * float(budget(dpa) / budget(tp)), rel=1e-6)
  assert ratio == pytest.approx(8.0, rel=0.01)
  assert float(g_dp.extras["concurrency"]) > 7.0 * float(g_tp.extras["concurrency"])


def test_dp_attention_decode_reads_own_kv_and_sends_all_to_all():
  model = _mla()
  job = cm.RLJob("grpo", model)
  cluster = cm.Cluster(H100, 8, 1)
  dpa = cm.Engine(tp=8.0, dp_attention=True)
  w, ep = gen_lib._engine_work(model, dpa, 64.0, 1000.0, 2.0, True, 1.0)
  assert float(ep) == 8.0 and float(w.rows) == 8.0  # 64 sequences over 8 GPUs
  assert float(w.tp_collectives) == 0.0 and float(w.ep_collectives) > 0
  c, m, x = gen_lib.decode_round(model, job, dpa, cluster, EFF, jnp.asarray(64.0),
                                 jnp.asarray(1000.0))
  assert all(np.isfinite(float(v)) and float(v) > 0 for v in (c, m, x))


# ----- gradients ----------------------------------------------------------------


NEW_FIELDS = ("matmul_half_width", "matmul_width_exponent", "fp8_matmul_efficiency",
              "moe_imbalance", "moe_layer_overhead_s")


def _train_time(fields, model, layout, tau):
  job = cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=1.0,
                 prompt_len=1.0, response=cm.ResponseLength.from_mean_max(2047.0, 2047.0, bins=1))
  cluster = cm.Cluster(H100, 8, 2)
  eff = dataclasses.replace(EFF, **fields)
  return train_lib.train(model, job, layout, 16.0, cluster, eff, tau=tau, seq_len=2048.0,
                         updates=1.0).time_s


def test_new_parameters_have_finite_nonzero_gradients_at_positive_tau():
  model = _moe(16, 2, 512)
  layout = cm.Parallel(ep=16.0, ep_overlap=0.5, zero_stage=1.0, recompute=0.0,
                       precision=cm.Precision(compute="fp8"))
  x0 = {f: jnp.asarray(float(getattr(EFF, f))) for f in NEW_FIELDS}
  g = jax.grad(lambda x: _train_time(x, model, layout, 0.1))(x0)
  for f in NEW_FIELDS:
    assert np.isfinite(float(g[f])) and float(g[f]) != 0.0, f
  # Layout leaves too: expert-TP degree and overlap share.
  lg = jax.grad(lambda lay: _train_time({}, model, lay, 0.1))(
      layout.replace(etp=jnp.asarray(1.0), ep_overlap=jnp.asarray(0.5)))
  assert np.isfinite(float(lg.etp)) and np.isfinite(float(lg.ep_overlap))
  assert float(lg.ep_overlap) <= 0.0  # more overlap never slows the step


def test_moe_imbalance_gradient_matches_finite_differences(x64):
  model = _moe(16, 2, 512)
  layout = cm.Parallel(ep=16.0, zero_stage=1.0, recompute=0.0)
  f = lambda v: _train_time({"moe_imbalance": v}, model, layout, 0.05)
  v, h = 1.2, 1e-5
  fd = (float(f(v + h)) - float(f(v - h))) / (2 * h)
  assert float(jax.grad(f)(jnp.asarray(v))) == pytest.approx(fd, rel=1e-5)


def test_train_stage_jits_once_and_vmaps_over_expert_layouts():
  model = _moe(16, 2, 512)
  job = cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=1.0)
  cluster = cm.Cluster(H100, 8, 2)

  def t(etp, ov):
    lay = cm.Parallel(ep=8.0, etp=etp, ep_overlap=ov, tp=2.0, zero_stage=1.0)
    return train_lib.train(model, job, lay, 16.0, cluster, EFF).time_s

  out = jax.jit(jax.vmap(t))(jnp.asarray([1.0, 2.0]), jnp.asarray([0.0, 1.0]))
  assert out.shape == (2,) and np.all(np.isfinite(np.asarray(out)))
