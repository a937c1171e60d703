"""Tests for model presets, Hugging Face config parsing and per-token counts."""

import json

import jax
import pytest

from costmodel import models
from costmodel._src.specs import hf_config
from costmodel._src.specs import hf_models
from costmodel._src.specs import model_presets
from costmodel._src.specs.model import ModelSpec

# ----- published parameter counts -------------------------------------------


@pytest.mark.parametrize("name", models.names())
def test_total_and_active_match_published(name):
  spec = models.get(name)
  total, active = models.published_params(name)
  rtol = model_presets.PUBLISHED[name].rtol
  # 1% unless the published figure is rounded more coarsely (documented in
  # model_presets.PUBLISHED); never looser than 2%.
  assert rtol <= 0.02
  assert spec.total_params == pytest.approx(total, rel=rtol)
  assert spec.active_params == pytest.approx(active, rel=rtol)


def test_only_documented_presets_need_more_than_one_percent():
  looser = {n for n, p in model_presets.PUBLISHED.items() if p.rtol > 0.01}
  assert looser == {"qwen3-1.7b", "qwen3-30b-a3b", "opt-13b"}


def test_dense_presets_have_active_equal_to_total():
  for name in models.names():
    spec = models.get(name)
    if not spec.is_moe:
      assert spec.active_params == spec.total_params, name


def test_llama_3_1_8b_hand_derived_counts():
  spec = models.get("llama-3.1-8b")
  h, layers, ffn, vocab = 4096, 32, 14336, 128256
  q = o = h * 32 * 128                         # 16,777,216 each
  k = v = h * 8 * 128                          # 4,194,304 each
  attention = q + k + v + o                    # 41,943,040
  mlp = 3 * h * ffn                            # 176,160,768 (gate, up, down)
  norms = 2 * h                                # 8,192 (two RMSNorms)
  per_layer = attention + mlp + norms          # 218,112,000
  embed = head = vocab * h                     # 525,336,576 each (untied)
  total = layers * per_layer + embed + head + h  # + final RMSNorm
  assert attention == 41_943_040
  assert per_layer == 218_112_000
  assert total == 8_030_261_248
  assert spec.attention_params() == attention
  assert spec.dense_mlp_params() == mlp
  assert spec.embedding_params() == embed + head
  assert spec.total_params == total
  assert spec.active_params == total


def test_deepseek_v3_hand_derived_attention_and_experts():
  spec = models.get("deepseek-v3")
  h, heads = 7168, 128
  q = h * 1536 + 1536 + 1536 * heads * (128 + 64)        # q_a, q_a_norm, q_b
  kv = h * (512 + 64) + 512 + 512 * heads * (128 + 128)  # kv_a, norm, kv_b
  o = heads * 128 * h
  assert spec.attention_params() == q + kv + o == 187_107_328
  assert spec.expert_params() == 3 * h * 2048 == 44_040_192
  assert spec.n_moe_layers == 58 and spec.n_dense_layers == 3
  # DeepSeek's own convention (input embedding not active): 36.6B.
  without_embedding = spec.active_params - spec.vocab * spec.hidden
  assert without_embedding == pytest.approx(36.6e9, rel=0.01)


def test_opt_350m_embedding_projection():
  spec = models.get("opt-350m")
  # 50272 x 512 tokens (tied head) + 2050 x 1024 positions + 512<->1024
  # projections in and out.
  assert spec.embedding_params() == 50272 * 512 + 2050 * 1024 + 2 * 512 * 1024
  assert spec.token_embed_dim == 512


# ----- FLOPs and KV-cache bytes per token -----------------------------------


def test_forward_flops_llama_3_1_8b_hand_derived():
  spec = models.get("llama-3.1-8b")
  # Weights multiplied per token: 32 layers x (41,943,040 attention +
  # 176,160,768 MLP) + 525,336,576 LM head = 7,504,658,432. The input
  # embedding is a lookup, not a matmul.
  matmul = 32 * (41_943_040 + 176_160_768) + 525_336_576
  assert matmul == 7_504_658_432
  context = 1024
  # Scores and values: 2 FLOPs x 32 heads x (128 + 128) per key, 32 layers.
  attention = 32 * 2 * 32 * (128 + 128) * context
  assert attention == 536_870_912
  expected = 2 * matmul + attention                 # 15,546,187,776
  # ModelSpec's matmul figure also holds the RMSNorm weights (2h per layer,
  # 0.003%), hence rel=1e-4 rather than exact.
  assert spec.forward_flops_per_token(context) == pytest.approx(expected, rel=1e-4)
  assert spec.attention_flops_per_token(context) == attention
  assert spec.training_flops_per_token(context) == pytest.approx(3 * expected, rel=1e-4)


def test_forward_flops_moe_uses_active_experts_only():
  spec = models.get("mixtral-8x7b")
  dense_equivalent = spec.replace(n_experts=0, top_k=0, expert_ffn_hidden=0)
  # top-2 of 8 experts: per layer 2 x 176,160,768 MLP weights + the router.
  extra = 32 * (176_160_768 + 4096 * 8)
  assert spec.matmul_params_per_token == dense_equivalent.matmul_params_per_token + extra


def test_deepseek_v3_attention_flops_use_mla_head_dims():
  spec = models.get("deepseek-v3")
  # qk width 128 nope + 64 rope = 192, value width 128.
  assert spec.attention_flops_per_token(4096) == 61 * 2 * 128 * (192 + 128) * 4096


def test_kv_bytes_per_token():
  # Llama-3(.1)-70B, BF16: 2 (K and V) x 80 layers x 8 KV heads x 128 x 2 B.
  assert models.get("llama-3.1-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 327_680
  # DeepSeek-V3 MLA caches the 512-wide latent and the 64-wide rotary key.
  assert models.get("deepseek-v3").kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272
  assert models.get("llama-3.1-8b").kv_bytes_per_token(1) == 2 * 32 * 8 * 128


# ----- from_hf_config round trips ---------------------------------------------

# Subsets of the configs named in model_presets (plus keys the parser ignores).
_HF_CONFIGS = {
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "tie_word_embeddings": False, "attention_bias": False,
        "mlp_bias": False, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "llama3"},
        "max_position_embeddings": 131072},
    "llama-2-13b": {
        "model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824,
        "num_attention_heads": 40, "num_hidden_layers": 40,
        "vocab_size": 32000, "rms_norm_eps": 1e-05},
    "qwen2.5-1.5b": {
        "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
        "num_attention_heads": 12, "num_hidden_layers": 28,
        "num_key_value_heads": 2, "vocab_size": 151936,
        "tie_word_embeddings": True, "max_window_layers": 21},
    "qwen2.5-math-7b": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_attention_heads": 28, "num_hidden_layers": 28,
        "num_key_value_heads": 4, "vocab_size": 152064,
        "tie_word_embeddings": False, "rope_theta": 10000,
        "max_position_embeddings": 4096, "sliding_window": None},
    "qwen3-0.6b": {
        "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
        "num_attention_heads": 16, "num_hidden_layers": 28,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": True, "attention_bias": False},
    "qwen3-8b": {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_attention_heads": 32, "num_hidden_layers": 36,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "attention_bias": False},
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_attention_heads": 32, "num_hidden_layers": 48,
        "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
        "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True, "tie_word_embeddings": False},
    "qwen3-235b-a22b": {
        "model_type": "qwen3_moe", "hidden_size": 4096,
        "intermediate_size": 12288, "moe_intermediate_size": 1536,
        "num_attention_heads": 64, "num_hidden_layers": 94,
        "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
        "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "tie_word_embeddings": False},
    "mixtral-8x7b": {
        "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8,
        "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "tie_word_embeddings": False,
        "sliding_window": None},
    "deepseek-v3": {
        "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
        "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid"},
    "opt-350m": {
        "model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096,
        "num_attention_heads": 16, "num_hidden_layers": 24,
        "max_position_embeddings": 2048, "vocab_size": 50272,
        "word_embed_proj_dim": 512, "do_layer_norm_before": False,
        "enable_bias": True, "_remove_final_layer_norm": False},
    "opt-1.3b": {
        "model_type": "opt", "hidden_size": 2048, "ffn_dim": 8192,
        "num_attention_heads": 32, "num_hidden_layers": 24,
        "max_position_embeddings": 2048, "vocab_size": 50272,
        "word_embed_proj_dim": 2048, "do_layer_norm_before": True},
    "opt-66b": {
        "model_type": "opt", "hidden_size": 9216, "ffn_dim": 36864,
        "num_attention_heads": 72, "num_hidden_layers": 64,
        "max_position_embeddings": 2048, "vocab_size": 50272,
        "word_embed_proj_dim": 9216},
}


def test_round_trip_covers_every_supported_model_type():
  covered = {c["model_type"] for c in _HF_CONFIGS.values()}
  # The model types of the newer families are covered by the strictly read
  # table of models by Hugging Face id (tests/test_hf_models.py).
  in_table = {e["config"]["model_type"] for e in hf_models.table().values() if "config" in e}
  assert covered | in_table | {"deepseek_v2", "deepseek_v32"} == set(
      hf_config.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("name", sorted(_HF_CONFIGS))
def test_from_hf_config_file_round_trip(name, tmp_path):
  path = tmp_path / f"{name}.json"
  path.write_text(json.dumps(_HF_CONFIGS[name]))
  spec = hf_config.from_hf_config(path)  # name from the file stem
  assert spec == models.get(name)
  assert ModelSpec.from_hf_config(str(path)) == spec


def test_from_hf_config_dict_and_names(tmp_path):
  cfg = dict(_HF_CONFIGS["llama-3.1-8b"], _name_or_path="meta-llama/Llama-3.1-8B")
  assert hf_config.from_hf_config(cfg).name == "meta-llama/Llama-3.1-8B"
  assert hf_config.from_hf_config(cfg, name="mine").name == "mine"
  assert hf_config.from_hf_config(_HF_CONFIGS["opt-1.3b"]).name == "opt"
  folder = tmp_path / "Llama-3.1-8B"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(_HF_CONFIGS["llama-3.1-8b"]))
  spec = hf_config.from_hf_config(folder)
  assert spec.name == "Llama-3.1-8B"
  assert spec.replace(name="llama-3.1-8b") == models.get("llama-3.1-8b")


def test_qwen3_moe_dense_layers_from_sparse_step_and_mlp_only_layers():
  cfg = dict(_HF_CONFIGS["qwen3-30b-a3b"], num_hidden_layers=8,
             decoder_sparse_step=2, mlp_only_layers=[1, 4])
  spec = hf_config.from_hf_config(cfg)
  # Sparse when (i + 1) % 2 == 0 and i not in [1, 4]: layers 3, 5, 7.
  assert spec.n_moe_layers == 3 and spec.n_dense_layers == 5
  assert spec.ffn_hidden == 6144
  dense = hf_config.from_hf_config(dict(cfg, num_experts=0))
  assert not dense.is_moe and dense.n_dense_layers == 8


def test_deepseek_v2_without_query_compression():
  cfg = dict(_HF_CONFIGS["deepseek-v3"], model_type="deepseek_v2",
             q_lora_rank=None, n_shared_experts=2, first_k_dense_replace=1,
             num_hidden_layers=27, moe_layer_freq=1)
  spec = hf_config.from_hf_config(cfg)
  assert spec.q_lora_rank == 0 and spec.is_mla
  assert spec.shared_ffn_hidden == 2 * 2048
  assert spec.n_dense_layers == 1 and spec.n_moe_layers == 26
  h, heads = 7168, 128
  assert spec.attention_params() == (
      h * heads * 192 + h * 576 + 512 + 512 * heads * 256 + heads * 128 * h)


def test_presets_are_static_pytrees():
  spec = models.get("qwen3-8b")
  assert jax.tree_util.tree_leaves(spec) == []
  assert hash(spec) == hash(models.get("QWEN3-8B"))
  assert models.get("Qwen3-8B") is spec


def test_public_names():
  for name in models.__all__:
    assert callable(getattr(models, name))
  assert len(models.names()) == len(set(models.names())) == 28


# ----- errors ------------------------------------------------------------------


def test_model_spec_rejects_bad_sizes():
  base = model_presets.PRESETS["llama-3.1-8b"]
  with pytest.raises(ValueError, match="n_layers=0"):
    ModelSpec(name="x", **dict(base, n_layers=0))
  with pytest.raises(ValueError, match="hidden=-4096"):
    ModelSpec(name="x", **dict(base, hidden=-4096))
  with pytest.raises(ValueError, match="n_heads=32 must be divisible by n_kv_heads=5"):
    ModelSpec(name="x", **dict(base, n_kv_heads=5))
  with pytest.raises(ValueError, match="embed_dim=-1"):
    ModelSpec(name="x", **dict(base, embed_dim=-1))


def test_unknown_preset_lists_known_names():
  with pytest.raises(ValueError, match="'gpt-5'.*llama-3.1-8b.*deepseek-v3.*opt-175b"):
    models.get("gpt-5")
  with pytest.raises(ValueError, match="known presets"):
    models.published_params("nope")


@pytest.mark.parametrize("key, value, match", [
    ("hidden_size", 0, "hidden_size=0 must be positive"),
    ("num_hidden_layers", -2, "num_hidden_layers=-2 must be positive"),
    ("hidden_size", "4096", "hidden_size='4096' must be an integer"),
    ("hidden_size", 4096.0, "hidden_size=4096.0 must be an integer"),
    ("num_hidden_layers", True, "num_hidden_layers=True must be an integer"),
    ("tie_word_embeddings", "no", "tie_word_embeddings='no' must be true or false"),
    ("num_key_value_heads", 5,
     "num_attention_heads=32 must be divisible by num_key_value_heads=5"),
])
def test_from_hf_config_rejects_bad_values(key, value, match, tmp_path):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(dict(_HF_CONFIGS["llama-3.1-8b"], **{key: value})))
  with pytest.raises(ValueError, match=match) as info:
    hf_config.from_hf_config(path)
  assert "bad.json" in str(info.value)


def test_from_hf_config_missing_key_names_it():
  cfg = dict(_HF_CONFIGS["mixtral-8x7b"])
  del cfg["num_local_experts"]
  with pytest.raises(ValueError, match="missing required key 'num_local_experts'"):
    hf_config.from_hf_config(cfg)
  cfg = dict(_HF_CONFIGS["opt-1.3b"])
  del cfg["ffn_dim"]
  with pytest.raises(ValueError, match="config dict: missing required key 'ffn_dim'"):
    hf_config.from_hf_config(cfg)


def test_from_hf_config_unsupported_model_type_lists_supported():
  cfg = dict(_HF_CONFIGS["llama-3.1-8b"], model_type="gpt2")
  with pytest.raises(ValueError, match="model_type='gpt2'") as err:
    hf_config.from_hf_config(cfg)
  listed = str(err.value).split("supported model types: ", 1)[1].split(", ")
  assert set(listed) == set(hf_config.SUPPORTED_MODEL_TYPES)
  assert {"llama", "qwen3_moe", "deepseek_v3", "gpt_oss", "nemotron_h"} <= set(listed)
  cfg.pop("model_type")
  with pytest.raises(ValueError, match="model_type=None"):
    hf_config.from_hf_config(cfg)


def test_from_hf_config_bad_files(tmp_path):
  with pytest.raises(ValueError, match="missing.json.*does not exist"):
    hf_config.from_hf_config(tmp_path / "missing.json")
  broken = tmp_path / "broken.json"
  broken.write_text('{"model_type": "llama", "hidden_size": 4096,')
  with pytest.raises(ValueError, match="broken.json: invalid JSON"):
    hf_config.from_hf_config(broken)
  array = tmp_path / "array.json"
  array.write_text("[1, 2]")
  with pytest.raises(ValueError, match="array.json: top-level JSON value must be an object"):
    hf_config.from_hf_config(array)
  with pytest.raises(TypeError, match="must be a path or a dict"):
    hf_config.from_hf_config(42)


def test_from_hf_config_bad_layer_list():
  cfg = dict(_HF_CONFIGS["qwen3-30b-a3b"], mlp_only_layers=[0, 48])
  with pytest.raises(ValueError, match=r"mlp_only_layers=\[0, 48\] must be a list"):
    hf_config.from_hf_config(cfg)
