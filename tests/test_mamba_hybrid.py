"""Mamba-2 hybrids (Nemotron-H, Nemotron 3): parameters, FLOPs, state and
layouts against hand-derived formulas.

Mamba-2 (Dao & Gu 2024, arXiv:2405.21060) layer with H heads of P, state N,
G groups, K taps, chunk Q, inner width d = H P and xBC width c = d + 2 G N:
in_proj h (d + c + H), conv c (K + 1), A_log/D/dt_bias 3 H, gated norm d,
out_proj d h; scan H (4 N P + 2 Q P) + 2 G Q N FLOPs per token; a state of
H P N plus (K - 1) c elements per sequence.
"""

import jax
import jax.numpy as jnp
import pytest

import costmodel as cm
from costmodel._src.ops import layers
from costmodel._src.ops import lora as lora_lib
from costmodel._src.specs import hf_config
from costmodel._src.specs import hf_models
from costmodel._src.specs import mamba
from costmodel._src.specs import mixers
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import kv_state

EFF = cm.Efficiency()
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16"


def _mamba_params(h, heads, p, n, g, k):
  d, c = heads * p, heads * p + 2 * g * n
  return h * (d + c + heads) + c * (k + 1) + 3 * heads + d + d * h


def test_nemotron3_nano_layers_and_parameters_hand_derived():
  nano = cm.models.from_hf_id(NANO)
  assert (nano.n_layers_of("mamba"), nano.n_layers_of("full_attention"),
          nano.n_layers_of("mlp_only")) == (23, 6, 23)
  assert nano.n_moe_layers == 23 and nano.n_dense_layers == 0 and nano.n_sublayers == 52
  h = 2688
  m = _mamba_params(h, 64, 64, 128, 8, 4)
  assert mamba.params(nano) == m == h * (4096 + 6144 + 64) + 6144 * 5 + 192 + 4096 + 4096 * h
  attn = h * 32 * 128 * 2 + 2 * h * 2 * 128  # q and o; k and v of 2 KV heads
  expert = 2 * h * 1856                      # squared-ReLU: up and down
  moe = h * 128 + 128 * expert + 2 * h * 3712
  total = 23 * m + 6 * attn + 23 * moe + 52 * h + 2 * 131072 * h + h
  assert nano.total_params == total
  active = 23 * m + 6 * attn + 23 * (h * 128 + 6 * expert + 2 * h * 3712) + 52 * h + (
      2 * 131072 * h + h)
  assert nano.active_params == active
  assert nano.n_tensors == 23 * 8 + 6 * 4 + 52 + 23 * (1 + 128 * 2 + 2) + 2 + 1


def test_mamba_state_is_fixed_and_only_attention_layers_grow():
  nano = cm.models.from_hf_id(NANO)
  state = 64 * 64 * 128 * 2       # H P N at BF16
  conv = 3 * (4096 + 2 * 8 * 128) * 2  # the last K - 1 = 3 inputs of x, B, C
  assert mixers.state_bytes_per_seq(nano) == 23 * (state + conv)
  kv = 6 * 2 * 2 * 128 * 2        # 6 attention layers, K and V of 2 heads of 128
  assert nano.kv_bytes_per_token() == kv
  for length in (1.0, 65536.0):
    assert float(nano.seq_cache_bytes(length)) == pytest.approx(kv * length + 23 * (state + conv))
  # A decode step reads the KV of the context and reads and writes the state.
  assert float(mixers.kv_read_bytes(nano, 1000.0)) == pytest.approx(
      kv * 1000.0 + 2 * 23 * (state + conv))
  # Under TP the state splits by the 64 Mamba heads, the KV by its 2 heads.
  got = kv_state.seq_cache_bytes_per_gpu(nano, cm.Engine(tp=4.0), 2.0, 1000.0)
  assert float(got) == pytest.approx(kv * 1000.0 / 2.0 + 23 * (state + conv) / 4.0, rel=1e-3)


def test_scan_flops_per_token_do_not_grow_with_the_context():
  nano = cm.models.from_hf_id(NANO)
  scan = 64 * (4 * 128 * 64 + 2 * 128 * 64) + 2 * 8 * 128 * 128
  assert mamba.scan_flops_per_token(nano) == scan
  per_key = 2 * 32 * (128 + 128)
  for ctx in (10.0, 100_000.0):
    assert float(nano.attention_flops_per_token(ctx)) == pytest.approx(
        6 * per_key * ctx + 23 * scan)
    assert float(nano.forward_flops_per_token(ctx)) == pytest.approx(
        2.0 * nano.matmul_params_per_token + 6 * per_key * ctx + 23 * scan)


def test_latent_moe_experts_work_in_the_latent_width():
  sup = cm.models.from_hf_id(SUPER)
  h, lat = 4096, 1024
  assert sup.expert_width == lat and sup.expert_params() == 2 * lat * 2688
  assert sup.moe_mlp_params(active=False) == (h * 512 + 512 * 2 * lat * 2688 + 2 * h * 5376
                                              + 2 * h * lat)
  assert (sup.n_layers_of("mamba"), sup.n_layers_of("full_attention"), sup.n_moe_layers) == (
      40, 8, 40)
  work = layers.forward_work(sup, 4096.0, 2048.0, tp=1.0, ep=8.0, etp=1.0)
  up, down = work.expert_gemms
  assert float(up.k) == lat and float(down.n) == lat and float(up.n) == 2688
  # The all-to-all carries the top-22 copies at the latent width.
  assert float(work.ep_bytes) == pytest.approx(2.0 * 4096 * 22 * lat)


def test_single_branch_blocks_halve_the_collectives_and_norm_traffic():
  nano = cm.models.from_hf_id(NANO)
  w = layers.forward_work(nano, 1024.0, 512.0, tp=2.0, pp=2.0)
  assert float(w.tp_collectives) == pytest.approx(52 / 2)  # one all-reduce per block
  std = cm.models.get("qwen3-8b")
  assert float(layers.forward_work(std, 1024.0, 512.0, tp=2.0, pp=2.0).tp_collectives) == (
      pytest.approx(2 * 36 / 2))


def test_training_activations_mean_over_blocks():
  nano = cm.models.from_hf_id(NANO)
  h, d, c = 2688, 4096, 6144
  m_units = (2 * h + 2 * (d + c + 64) + 2 * c + 4 * d + h) / h
  assert mamba.activation_units(nano) == pytest.approx(m_units)
  attn_units = (23 * m_units + 6 * 11.0) / 52
  assert mixers.attention_activation_units(nano) == pytest.approx(attn_units)
  ffn = 23 * (6 * 1856 + 3712) / 52
  base = attn_units + 2.0 + 19.0 * ffn / (4.0 * h)  # one norm per block
  got = layers.activation_bytes_per_layer(nano, seq=4096.0, micro_batch=1.0, tp=1.0, cp=1.0,
                                          recompute=0, sequence_parallel=True,
                                          flash_attention=True)
  assert float(got) == pytest.approx(4096.0 * h * base)


def test_lora_attention_targets_only_the_attention_blocks():
  nano = cm.models.from_hf_id(NANO)
  lora = lora_lib.LoRA(rank=8, targets=("q", "k", "v", "o"))
  h = 2688
  per_layer = 8 * ((h + 4096) + (h + 256) * 2 + (4096 + h))
  assert lora_lib.adapter_params(nano, lora) == 6 * per_layer


def test_float32_ssm_state_doubles_the_state_not_the_conv_or_kv(cluster_2x8):
  # vLLM's mamba_ssm_cache_dtype="float32": the H P N state at 4 bytes, the rest at BF16.
  nano = cm.models.from_hf_id(NANO)
  state, conv, kv = 64 * 64 * 128, 3 * (4096 + 2 * 8 * 128) * 2, 6 * 2 * 2 * 128 * 2
  fp32 = cm.Engine(tp=4.0, precision=cm.Precision(state="fp32"))
  got = kv_state.seq_cache_bytes_per_gpu(nano, fp32, 2.0, 1000.0)
  assert float(got) == pytest.approx(kv * 1000.0 / 2.0 + 23 * (4 * state + conv) / 4.0, rel=1e-3)
  read = kv_state.kv_read_bytes_per_gpu(nano, fp32, 2.0, 1000.0)
  assert float(read) == pytest.approx(kv * 1000.0 / 2.0 + 2 * 23 * (4 * state + conv) / 4.0,
                                      rel=1e-3)
  # The engine's concurrency is its cache budget over a sequence's cache: fewer sequences.
  job = cm.RLJob("grpo", nano, prompts_per_step=1024.0, samples_per_prompt=16.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(4000.0, 8192.0))
  engines = [cm.Engine(tp=2.0, memory_fraction=0.9, max_seqs=1e5, precision=cm.Precision(**p))
             for p in ({}, {"state": "fp32"})]
  c_auto, c_fp32 = (float(gen_lib.generate(nano, job, e, 2.0, cluster_2x8, EFF)
                          .extras["concurrency"]) for e in engines)
  seq = [float(kv_state.seq_cache_bytes_per_gpu(nano, e, 2.0, 1024.0 + 4000.0)) for e in engines]
  assert c_fp32 / c_auto == pytest.approx(seq[0] / seq[1], rel=1e-2) and c_fp32 < c_auto
  with pytest.raises(ValueError, match=r"state='fp64'"):
    cm.Precision(state="fp64")


def test_hybrid_engine_holds_more_sequences_than_its_full_attention_twin(cluster_2x8):
  nano = cm.models.from_hf_id(NANO)
  twin = nano.replace(name="twin", layer_types=tuple(
      "full_attention" if t == "mamba" else t for t in nano.layer_types))
  engine = cm.Engine(tp=2.0, memory_fraction=0.9)

  def job(model):
    return cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=16.0,
                    prompt_len=1024.0,
                    response=cm.ResponseLength.from_mean_max(24000.0, 32768.0))

  ch = gen_lib.generate(nano, job(nano), engine, 2.0, cluster_2x8, EFF)
  cf = gen_lib.generate(twin, job(twin), engine, 2.0, cluster_2x8, EFF)
  assert float(ch.extras["concurrency"]) > 3.0 * float(cf.extras["concurrency"])
  assert jnp.isfinite(ch.time_s) and float(ch.time_s) < float(cf.time_s)


def test_layers_block_type_reads_as_the_pattern():
  cfg = dict(hf_models.table()[NANO]["config"])
  pattern = cfg.pop("hybrid_override_pattern")
  names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
  listed = hf_config.from_hf_config(dict(cfg, layers_block_type=[names[c] for c in pattern]),
                                    name="x")
  assert listed == cm.models.from_hf_id(NANO).replace(name="x")


def test_dense_nemotron_h_reads_its_mlp_blocks():
  v2 = cm.models.from_hf_id("nvidia/NVIDIA-Nemotron-Nano-12B-v2")
  h = 5120
  m = _mamba_params(h, 128, 80, 128, 8, 4)
  attn = 2 * h * 40 * 128 + 2 * h * 8 * 128
  mlp = 2 * h * 20480
  assert v2.total_params == 28 * m + 6 * attn + 28 * mlp + 62 * h + 2 * 131072 * h + h
  assert not v2.is_moe and v2.n_dense_layers == 28


@pytest.mark.parametrize("change, match", [
    ({"hybrid_override_pattern": "MEMEX"}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": "ME*"}, "hybrid_override_pattern"),
    ({"layers_block_type": ["mamba"] * 51 + ["lstm"]}, "layers_block_type"),
    ({"mamba_num_heads": 60}, "mamba_heads=60 must be divisible by mamba_groups=8"),
    ({"ssm_state_size": 0}, "ssm_state_size=0 must be positive"),
])
def test_bad_hybrid_configs_refused_naming_the_key(change, match):
  cfg = dict(hf_models.table()[NANO]["config"], **change)
  with pytest.raises(ValueError, match=match):
    hf_config.from_hf_config(cfg)


def test_spec_without_mamba_shapes_refused():
  base = cm.models.get("qwen3-0.6b")
  with pytest.raises(ValueError, match="mamba layers need mamba_heads"):
    base.replace(layer_types=("mamba",) + base.layer_types[1:] if base.layer_types else
                 ("mamba",) + ("full_attention",) * (base.n_layers - 1))
  with pytest.raises(ValueError, match="mixer_only_layers=29 exceeds"):
    base.replace(mixer_only_layers=29)


def test_gradients_through_hybrid_costs_are_finite():
  nano = cm.models.from_hf_id(NANO)

  def cost(ctx):
    return nano.attention_flops_per_token(ctx) + nano.seq_cache_bytes(ctx)

  for ctx in (64.0, 50_000.0):
    g = jax.grad(cost)(jnp.asarray(ctx))
    assert jnp.isfinite(g) and g > 0


def test_mtp_draft_of_a_hybrid_is_one_attention_and_moe_layer():
  from costmodel._src.stages import speculative  # pylint: disable=g-import-not-at-top
  sup = cm.models.from_hf_id(SUPER)
  spec = cm.Speculative(kind="mtp", draft_tokens=3.0, acceptance=0.7)
  spec.check_model(sup)
  draft = speculative.draft_spec(sup, spec)
  assert draft.n_layers == 1 and draft.n_softmax_layers == 1 and draft.n_moe_layers == 1
  assert speculative.draft_weight_params(sup, spec) == (
      sup.attention_params() + sup.moe_mlp_params(active=False) + 2 * 4096)


def test_training_tp_must_divide_the_mamba_groups():
  from costmodel._src.specs import constraints  # pylint: disable=g-import-not-at-top
  nano = cm.models.from_hf_id(NANO)
  constraints.check_rules("layout", constraints.layout_fields(nano, 16.0, 8.0, 1.0, 1.0, 1.0))
  with pytest.raises(ValueError, match="tp=16 must divide the Mamba layers' mamba_groups=8"):
    constraints.check_rules("layout", constraints.layout_fields(nano, 16.0, 16.0, 1.0, 1.0, 1.0))
  # Models without Mamba layers are not held to it.
  q = cm.models.get("qwen3-8b")
  assert constraints.rule_mask("layout", constraints.layout_fields(q, 16.0, 16.0, 1.0, 1.0, 1.0),
                               only=("tp_divides_mamba_groups",))


def test_context_parallel_exchange_by_block_kind():
  nano = cm.models.from_hf_id(NANO)
  tokens, cp, tp = 8192.0, 4.0, 2.0
  w = layers.forward_work(nano, tokens, 1024.0, tp=tp, cp=cp)
  t_loc = tokens / cp
  kv = 2.0 * t_loc * 2 * 2 * 128 / 2.0             # K and V of 2 heads, split over TP 2
  a2a = 2.0 * t_loc * (2 * 4096 + 6144 + 64) / (tp * cp)  # z, x, B, C, dt in; y out
  assert float(w.cp_bytes) == pytest.approx((6 * kv + 23 * a2a) / 52)


def test_weight_gemms_per_block_kind():
  nano = cm.models.from_hf_id(NANO)
  w = layers.forward_work(nano, 1024.0, 512.0)
  # 23 Mamba (in, out), 6 attention (q, k, v, o), 23 MoE blocks (up, down) and the LM head.
  assert float(w.n_gemms) == pytest.approx(23 * 2 + 6 * 4 + 23 * 2 + 1)
  std = cm.models.get("qwen3-8b")
  assert float(layers.forward_work(std, 1024.0, 512.0).n_gemms) == pytest.approx(36 * 7 + 1)


def test_a_shipped_config_json_with_its_other_keys_reads_as_the_table_entry(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  cfg = dict(hf_models.table()[NANO]["config"], architectures=["NemotronHForCausalLM"],
             intermediate_size=1856, expand=2, mamba_hidden_act="silu", mlp_hidden_act="relu2",
             mamba_proj_bias=False, use_conv_bias=True, use_bias=False, mlp_bias=False,
             attention_bias=False, n_group=1, topk_group=1, norm_topk_prob=True,
             routed_scaling_factor=2.5, rope_theta=10000, max_position_embeddings=262144,
             time_step_min=0.001, time_step_max=0.1, torch_dtype="bfloat16")
  path = tmp_path / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json"
  path.parent.mkdir()
  path.write_text(json.dumps(cfg))
  spec = hf_config.from_hf_config(path)
  assert spec.name == "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
  assert spec.replace(name="x") == cm.models.from_hf_id(NANO).replace(name="x")
  with pytest.raises(ValueError, match=r"unknown key\(s\) \['architectures'"):
    hf_config.from_hf_config(path, strict=True)
