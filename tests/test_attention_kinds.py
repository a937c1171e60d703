"""Attention kinds per layer: memory and time against hand-derived formulas.

Full attention caches every token; sliding-window layers cap their cache at
the window; Gated DeltaNet (linear attention) layers hold a fixed state per
sequence and cost a fixed amount per token; DeepSeek sparse attention scores
every key with its indexer and attends to top-k of them.
"""

import jax
import jax.numpy as jnp
import pytest

import costmodel as cm
from costmodel._src.ops import layers
from costmodel._src.specs import mixers
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import kv_state

EFF = cm.Efficiency()


def _job(model, mean, max_len, samples=16.0, prompts=64.0):
  return cm.RLJob("grpo", model, prompts_per_step=prompts, samples_per_prompt=samples,
                  prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(mean, max_len))


def test_layer_patterns_read_from_config_facts():
  q35 = cm.models.from_hf_id("Qwen/Qwen3.5-397B-A17B")
  assert q35.n_layers_of("linear_attention") == 45 and q35.n_layers_of("full_attention") == 15
  assert q35.layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
  oss = cm.models.from_hf_id("openai/gpt-oss-120b")
  assert oss.n_layers_of("sliding_attention") == oss.n_layers_of("full_attention") == 18
  gemma3 = cm.models.from_hf_id("google/gemma-3-1b-pt")
  assert gemma3.layer_types[4:6] == ("sliding_attention", "full_attention")
  assert cm.models.get("qwen3-8b").n_layers_of("full_attention") == 36


def test_sliding_window_cache_stops_at_the_window():
  oss = cm.models.from_hf_id("openai/gpt-oss-20b")
  per_token_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, BF16
  for length in (100.0, 128.0, 5000.0):
    expected = 12 * per_token_layer * length + 12 * per_token_layer * min(length, 128.0)
    assert float(oss.seq_cache_bytes(length)) == pytest.approx(expected)
  # Attention work: full layers over the context, sliding ones over at most 128 keys.
  per_key = 2 * 64 * (64 + 64)
  assert float(oss.attention_flops_per_token(4096.0)) == pytest.approx(
      12 * per_key * 4096 + 12 * per_key * 128)


def test_gated_deltanet_state_is_fixed_per_sequence():
  q9 = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  state = 32 * 128 * 128 * 2                # 32 value heads, 128 x 128 state, BF16
  conv = (2 * 16 * 128 + 32 * 128) * 3 * 2  # q, k, v inputs of a 4-tap convolution
  assert mixers.state_bytes_per_seq(q9) == 24 * (state + conv)
  kv = 8 * 2 * 4 * 256 * 2                  # 8 full layers, 4 KV heads of 256
  for length in (1.0, 32768.0):
    assert float(q9.seq_cache_bytes(length)) == pytest.approx(kv * length + 24 * (state + conv))
  # Per-token core work of the linear layers does not depend on the length.
  lin = 24 * 32 * (6 * 128 * 128 + 2 * 64 * (128 + 128))
  full_per_key = 8 * 2 * 16 * (256 + 256)
  for ctx in (10.0, 100_000.0):
    assert float(q9.attention_flops_per_token(ctx)) == pytest.approx(full_per_key * ctx + lin)


def test_sparse_attention_indexer_plus_top_k():
  v32 = cm.models.from_hf_id("deepseek-ai/DeepSeek-V3.2-Exp")
  per_key = 2 * 128 * (192 + 128)   # MLA: 128 heads, q/k 128 + 64 rotary, v 128
  indexer = 2 * 64 * 128            # 64 indexer heads of 128 per key
  for ctx in (1000.0, 100_000.0):
    expected = 61 * (per_key * min(ctx, 2048.0) + indexer * ctx)
    assert float(v32.attention_flops_per_token(ctx)) == pytest.approx(expected)
  # Cache: the latent and rotary key plus the indexer's key per token per layer.
  assert v32.kv_bytes_per_token(1.0) == 61 * (512 + 64 + 128)
  # A decode step reads every indexer key but only top-k latents.
  read = mixers.kv_read_bytes(v32, 100_000.0, 1.0)
  assert float(read) == pytest.approx(61 * (128 * 100_000 + 576 * 2048))
  # The indexer's weights: wq_b from the query latent, wk, its LayerNorm, weights_proj.
  assert v32.indexer_params() == 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64


def test_gated_attention_and_deltanet_parameters_hand_derived():
  nxt = cm.models.from_hf_id("Qwen/Qwen3-Next-80B-A3B-Instruct")
  h = 2048
  attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h  # gated q, k, v, o
  gdn = (h * (2 * 2048 + 2 * 4096) + h * 2 * 32 + (2 * 2048 + 4096) * 4 + 2 * 32 + 128
         + 4096 * h)
  assert nxt.attention_params() == attn
  assert nxt.linear_attention_params() == gdn
  assert nxt.n_layers_of("linear_attention") == 36


def _twin_full_attention(model):
  """The same model with every layer full attention (the KV of all 32 layers)."""
  return model.replace(name=model.name + "-full", layer_types=())


def test_hybrid_engine_holds_more_sequences_at_long_context(cluster_2x8):
  hybrid = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  full = _twin_full_attention(hybrid)
  engine = cm.Engine(tp=1.0, memory_fraction=0.9)
  job_h, job_f = _job(hybrid, 24000.0, 32768.0), _job(full, 24000.0, 32768.0)
  ch = gen_lib.generate(hybrid, job_h, engine, 2.0, cluster_2x8, EFF)
  cf = gen_lib.generate(full, job_f, engine, 2.0, cluster_2x8, EFF)
  conc_h, conc_f = float(ch.extras["concurrency"]), float(cf.extras["concurrency"])
  # Hand-derived: the cache budget over one sequence's bytes at its mean length.
  length = 1024.0 + 24000.0

  def budget(c):  # what the memory fraction leaves after weights and workspace
    return float(c.extras["limit_bytes"]) - float(c.memory.weights) - float(c.memory.workspace)

  assert conc_f == pytest.approx(budget(cf) / (32 * 2 * 4 * 256 * 2 * length), rel=1e-3)
  assert conc_h == pytest.approx(budget(ch) / float(hybrid.seq_cache_bytes(length)), rel=1e-3)
  # Eight of 32 layers keep a KV cache: about four times the sequences.
  assert conc_h > 3.5 * conc_f
  assert float(ch.time_s) < float(cf.time_s)


def test_linear_state_shards_over_tensor_parallel_value_heads():
  q9 = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  state = mixers.state_bytes_per_seq(q9)
  kv = 8 * 2 * 4 * 256 * 2 * 1000.0
  # TP 8: 4 KV heads are replicated past TP 4; the 32 value heads split 8 ways.
  got = kv_state.seq_cache_bytes_per_gpu(q9, cm.Engine(tp=8.0), 2.0, 1000.0)
  assert float(got) == pytest.approx(kv / 4.0 + state / 8.0, rel=1e-3)


def test_training_activations_per_kind():
  q9 = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  units = mixers.linear_activation_units(q9)
  h, qk, v = 4096, 2048, 4096
  assert units == pytest.approx((2 * h + 2 * (2 * qk + 2 * v + 64) + 2 * (2 * qk + v) + 4 * v
                                 + h) / h)
  full = _twin_full_attention(q9)
  args = dict(seq=4096.0, micro_batch=1.0, tp=1.0, cp=1.0, recompute=0,
              sequence_parallel=True, flash_attention=True)
  a_h = float(layers.activation_bytes_per_layer(q9, **args))
  a_f = float(layers.activation_bytes_per_layer(full, **args))
  assert a_h - a_f == pytest.approx(4096.0 * h * 0.75 * (units - 11.0))


def test_gradients_through_kind_costs_are_finite():
  hybrid = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  oss = cm.models.from_hf_id("openai/gpt-oss-20b")
  v32 = cm.models.from_hf_id("deepseek-ai/DeepSeek-V3.2-Exp")

  def cost(ctx):
    return (hybrid.attention_flops_per_token(ctx) + oss.seq_cache_bytes(ctx)
            + mixers.kv_read_bytes(v32, ctx))

  for ctx in (64.0, 128.0, 2048.0, 50_000.0):
    g = jax.grad(cost)(jnp.asarray(ctx))
    assert jnp.isfinite(g) and g > 0


def test_hybrid_model_is_a_static_pytree():
  q9 = cm.models.from_hf_id("Qwen/Qwen3.5-9B")
  assert jax.tree_util.tree_leaves(q9) == []
  assert hash(q9) == hash(cm.models.from_hf_id("Qwen/Qwen3.5-9B"))


def test_qwen35_multimodal_config_reads_its_text_config():
  from costmodel._src.specs import hf_config  # pylint: disable=g-import-not-at-top
  from costmodel._src.specs import hf_models  # pylint: disable=g-import-not-at-top
  text = dict(hf_models.table()["Qwen/Qwen3.5-35B-A3B"]["config"], mtp_num_hidden_layers=1)
  text.pop("model_type")
  spec = hf_config.from_hf_config({"model_type": "qwen3_5_moe", "text_config": text,
                                   "vision_config": {"depth": 27}}, name="q35")
  assert spec.mtp_layers == 1
  assert spec.replace(mtp_layers=0, name="x") == cm.models.get(
      "Qwen/Qwen3.5-35B-A3B").replace(name="x")
