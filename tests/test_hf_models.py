"""Tests for the table of models by Hugging Face id (costmodel/data/hf_models.yaml)."""

import os

import pytest
import yaml

from costmodel import models
from costmodel._src.specs import hf_config
from costmodel._src.specs import hf_models
import export


def _active_as_published(spec, counts):
  """Active parameters under the convention the published figure uses."""
  embed = spec.vocab * spec.token_embed_dim
  untied_input = 0 if spec.tied_embeddings else embed
  return spec.active_params - {"both": 0, "head": embed, "neither": embed + untied_input}[counts]


@pytest.mark.parametrize("model_id", models.hf_ids())
def test_entry_loads_and_matches_published_counts(model_id):
  spec = models.from_hf_id(model_id)
  p = hf_models.published(model_id)
  assert spec.name == model_id
  # 1% unless the entry documents a coarser published figure; never looser than 3%,
  # except a size published only as the model's name (up to 9%, the entry says why).
  assert p.rtol <= (0.09 if "name" in p.source else 0.03)
  assert spec.total_params == pytest.approx(p.total, rel=p.rtol)
  if p.active is not None:
    assert _active_as_published(spec, p.active_counts) == pytest.approx(p.active, rel=p.rtol)


def test_only_documented_entries_need_more_than_one_percent():
  looser = {i for i in models.hf_ids()
            if "config" in hf_models.table()[i] and hf_models.published(i).rtol > 0.01}
  assert looser == {"zai-org/GLM-4.5-Air", "moonshotai/Kimi-K2-Instruct",
                    "nvidia/NVIDIA-Nemotron-Nano-12B-v2", "Qwen/Qwen3.5-2B", "Qwen/Qwen3.5-4B",
                    "XiaomiMiMo/MiMo-7B-RL"}
  for i in looser:
    assert "rounded" in hf_models.table()[i]["params_source"]


def test_qwen3_5_2b_tied_embeddings_fit_its_name_and_untied_do_not():
  # The 2B's tying is inferred from its neighbours; the count against the name tells the two apart.
  entry = hf_models.table()["Qwen/Qwen3.5-2B"]
  tied = models.from_hf_id("Qwen/Qwen3.5-2B")
  untied = hf_config.from_hf_config(dict(entry["config"], tie_word_embeddings=False))
  assert untied.total_params - tied.total_params == 248320 * 2048
  assert tied.total_params == pytest.approx(2.0e9, rel=0.06)
  assert untied.total_params > 2.0e9 * 1.06


def test_mimo_reads_qwen2_layout_and_its_mtp_layer():
  spec = models.from_hf_id("XiaomiMiMo/MiMo-7B-RL")
  h, f, vocab = 4096, 11008, 151680
  attention = 2 * h * h + 2 * h * 8 * 128 + (h + 2 * 8 * 128)  # q, o; k, v; q/k/v biases
  layer = attention + 3 * h * f + 2 * h
  assert spec.total_params == 36 * layer + 2 * vocab * h + h
  assert spec.mtp_layers == 1 and spec.qkv_bias


def test_every_entry_names_its_source():
  for model_id, entry in hf_models.table().items():
    assert entry["source"].strip(), model_id


def test_gpt_oss_20b_hand_derived_count():
  spec = models.from_hf_id("openai/gpt-oss-20b")
  h, layers, vocab = 2880, 24, 201088
  attention = 2 * h * 64 * 64 + 2 * h * 8 * 64 + (64 + 2 * 8) * 64  # q, o; k, v; q/k/v biases
  experts = 32 * 3 * h * 2880 + h * 32                                # 32 SwiGLU experts, router
  total = layers * (attention + experts + 2 * h) + 2 * vocab * h + h
  assert spec.total_params == total
  assert spec.n_layers_of("sliding_attention") == 12 and spec.sliding_window == 128


@pytest.mark.parametrize("model_id, base", [
    ("OpenRLHF/Llama-3-8b-sft-mixture", "meta-llama/Meta-Llama-3-8B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/Qwen2.5-Math-7B"),
    ("someone/DeepSeek-R1-Distill-Qwen-7B-GRPO-step200", "Qwen/Qwen2.5-Math-7B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen/Qwen2.5-14B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "meta-llama/Llama-3.3-70B-Instruct"),
    ("/checkpoints/run3/Qwen2.5-7B-Instruct/", "Qwen/Qwen2.5-7B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3"),
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B"),
    ("google/gemma-2-9b-it", "google/gemma-2-9b"),
    ("zai-org/GLM-4.5-Air-FP8", "zai-org/GLM-4.5-Air"),
    ("QWEN/QWEN2.5-14B", "Qwen/Qwen2.5-14B"),
    ("Qwen/Qwen2-1.5B-Instruct", "Qwen/Qwen2.5-1.5B"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-Base-BF16",
     "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
    ("${RAY_DATA_HOME}/models/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
     "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
    # A family, a total size and "moe": the family's one MoE of that size (veRL's
    # examples/grpo_trainer/run_qwen3_30b_veomni.sh at 1dda039 loads this path).
    ("/Qwen3-30B-MoE-merge", "Qwen/Qwen3-30B-A3B"),
    ("ckpt/qwen3-235b-moe", "Qwen/Qwen3-235B-A22B"),
])
def test_fine_tune_and_release_names_map_to_their_base(model_id, base):
  spec = models.from_hf_id(model_id)
  assert spec.name == model_id.rstrip("/")
  assert spec.replace(name="") == models.from_hf_id(base).replace(name="")


@pytest.mark.parametrize("model_id, base", [
    ("${HOME}/models/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-7B"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-3B"),
    ("/data/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-30B-A3B"),
    ("zai-org/GLM-4.1V-9B-Thinking", "THUDM/GLM-4-9B-0414"),
])
def test_vision_language_ids_cost_their_language_model_and_say_so(model_id, base):
  assert models.from_hf_id(model_id).replace(name="") == models.from_hf_id(base).replace(name="")
  assert models.hf_not_modelled(model_id) == ("the vision encoder (costed as its language model)",)
  assert models.hf_not_modelled(base) == ()


@pytest.mark.parametrize("model_id, base, left_out", [
    ("nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16",
     "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "the vision and audio encoders"),
    ("Qwen/Qwen2.5-Omni-7B", "Qwen/Qwen2.5-7B", "the audio and vision encoders and the speech"),
])
def test_omni_models_cost_their_language_model_and_say_what_is_left_out(model_id, base, left_out):
  assert models.from_hf_id(model_id).replace(name="") == models.from_hf_id(base).replace(name="")
  (note,) = models.hf_not_modelled(model_id)
  assert note.startswith(left_out)


def test_glm47_flash_hand_derived_latent_attention_and_experts():
  spec = models.from_hf_id("zai-org/GLM-4.7-Flash")
  h, a = 2048, 20
  attn = (h * 768 + 768 + 768 * a * (192 + 64)              # query down, norm, up
          + h * (512 + 64) + 512 + 512 * a * (192 + 256)    # kv down (+ rotary key), norm, up
          + a * 256 * h)                                    # output
  expert = 3 * h * 1536
  moe = h * 64 + 64 * expert + expert                       # router, 64 routed, 1 shared
  total = 47 * attn + 3 * h * 10240 + 46 * moe + 47 * 2 * h + 2 * 154880 * h + h
  assert spec.attention_params() == attn and spec.total_params == total
  assert spec.n_moe_layers == 46 and spec.top_k == 4 and spec.mtp_layers == 1


def test_seed_oss_hand_derived_count_with_qkv_biases():
  spec = models.from_hf_id("ByteDance-Seed/Seed-OSS-36B-Instruct")
  h, q, kv = 5120, 80 * 128, 8 * 128
  layer = 2 * h * q + 2 * h * kv + q + 2 * kv + 3 * h * 27648 + 2 * h
  assert spec.total_params == 64 * layer + 2 * 155136 * h + h


def test_minimax_m2_hand_derived_count_every_layer_sparse():
  spec = models.from_hf_id("MiniMaxAI/MiniMax-M2.7")
  h = 3072
  attn = 2 * h * 48 * 128 + 2 * h * 8 * 128
  moe = h * 256 + 256 * 3 * h * 1536
  assert spec.total_params == 62 * (attn + moe + 2 * h) + 2 * 200064 * h + h
  assert spec.n_moe_layers == 62 and spec.n_dense_layers == 0


def test_glm5_latent_attention_with_the_sparse_attention_indexer():
  spec = models.from_hf_id("zai-org/GLM-5.1")
  assert (spec.index_heads, spec.index_head_dim, spec.index_topk) == (32, 128, 2048)
  assert spec.indexer_params() == 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
  assert spec.n_dense_layers == 3 and spec.n_moe_layers == 75
  # Per cached token and layer: the 512-wide latent, the 64-wide rotary key, the indexer key.
  assert spec.kv_bytes_per_token(1.0) == 78 * (512 + 64 + 128)


def test_moonlight_hand_derived_mla_without_query_compression():
  spec = models.from_hf_id("moonshotai/Moonlight-16B-A3B-Instruct")
  assert spec.q_lora_rank == 0 and spec.kv_lora_rank == 512
  # 26 MoE layers (the first is dense) of 64 routed experts, 6 routed + 2 shared active
  assert spec.n_experts == 64 and spec.top_k == 6 and spec.first_dense_layers == 1
  expert = 3 * 2048 * 1408
  assert spec.total_params - spec.active_params == 26 * (64 - 6) * expert


def test_distill_with_its_own_head_is_not_its_base():
  distill = models.from_hf_id("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
  base = models.from_hf_id("Qwen/Qwen2.5-Math-1.5B")
  assert not distill.tied_embeddings and base.tied_embeddings
  assert distill.total_params - base.total_params == 151936 * 1536


@pytest.mark.parametrize("model_id, match", [
    ("acme/SuperModel-13B", r"'acme/SuperModel-13B'.*no entry of the table"),
    ("x/llama-3-8b-qwen2.5-7b-merge", r"different architectures.*Qwen2.5-7B"),
    ("meta-llama/Llama-3-80B", r"'meta-llama/Llama-3-80B'.*no entry"),  # no 8B inside 80B
    ("acme/Qwen3-70B-MoE", r"'acme/Qwen3-70B-MoE'.*no entry"),  # Qwen3 has no 70B MoE
    ("acme/Qwen3-30B-235B-MoE", r"no entry"),  # two sizes: which one is total?
    ("", r"non-empty"),
])
def test_unknown_or_ambiguous_id_refused_by_name(model_id, match):
  with pytest.raises(ValueError, match=match):
    models.from_hf_id(model_id)


def test_table_entries_are_read_strictly(monkeypatch):
  good = hf_models.table()["Qwen/Qwen2.5-14B"]["config"]
  with pytest.raises(ValueError, match=r"unknown key\(s\) \['rope_thetta'\]"):
    hf_config.from_hf_config(dict(good, rope_thetta=1e6), strict=True)
  missing = {k: v for k, v in good.items() if k != "tie_word_embeddings"}
  with pytest.raises(ValueError, match="missing required key 'tie_word_embeddings'"):
    hf_config.from_hf_config(missing, strict=True)
  # The same config outside strict mode takes transformers' default.
  assert not hf_config.from_hf_config(missing).tied_embeddings


@pytest.mark.parametrize("entry, match", [
    ({"preset": "qwen3-8b"}, "source"),
    ({"preset": "qwen9-8b", "source": "s"}, "is not a preset"),
    ({"same_as": "nope/none", "source": "s"}, "must name an entry"),
    ({"config": {"model_type": "llama"}, "source": "s"}, "needs params"),
    ({"preset": "qwen3-8b", "same_as": "Qwen/Qwen3-8B", "source": "s"}, "exactly one"),
    ({"preset": "qwen3-8b", "source": "s", "licence": "x"}, r"unknown key\(s\) \['licence'\]"),
    ({"preset": "qwen3-8b", "source": "s", "not_modelled": " "}, "not_modelled=' '"),
])
def test_bad_table_entries_refused(monkeypatch, entry, match):
  text = yaml.safe_dump({"Qwen/Qwen3-8B": {"preset": "qwen3-8b", "source": "s"},
                         "acme/Model": entry})
  monkeypatch.setattr(hf_models, "_table_text", lambda: text)
  hf_models.table.cache_clear()
  try:
    with pytest.raises(ValueError, match=match):
      hf_models.table()
  finally:
    hf_models.table.cache_clear()


def test_get_takes_a_preset_or_a_hugging_face_id():
  assert models.get("qwen3-8b") is models.get("Qwen3-8B")  # the preset, cached
  spec = models.get("Qwen/Qwen3.5-397B-A17B")
  assert spec.name == "Qwen/Qwen3.5-397B-A17B" and spec.n_layers == 60
  assert models.get("OpenRLHF/Llama-3-8b-sft-mixture").total_params == 8_030_261_248
  with pytest.raises(ValueError, match=r"unknown model 'gpt-5': not a preset \(llama-3.1-8b"):
    models.get("gpt-5")


def test_import_of_a_vision_language_run_lists_the_vision_encoder(tmp_path):
  shipped = os.path.join(os.path.dirname(__file__), "data", "verl_examples",
                         "run_qwen3_8b_fsdp_1dda039.txt")
  with open(shipped, encoding="utf-8") as f:
    text = f.read()
  vl = tmp_path / "run_qwen3_vl_8b.txt"
  vl.write_text(text.replace("model.path=Qwen/Qwen3-8B", "model.path=Qwen/Qwen3-VL-8B-Instruct"))
  plain = export.read_config("verl", shipped, response_mean=1000)
  got = export.read_config("verl", str(vl), response_mean=1000)
  assert got.job.actor.replace(name="") == plain.job.actor.replace(name="")
  assert "model: the vision encoder (costed as its language model)" in got.not_modelled
  assert not any(n.startswith("model:") for n in plain.not_modelled)


@pytest.mark.parametrize("model_id, reason", [
    ("google/gemma-4-31B-it", r"num_global_key_value_heads 4 against num_key_value_heads 16"),
    ("/ckpt/gemma-4-E2B-it", r"last 20 of 35 layers reuse earlier layers' KV cache"),
    ("${HDFS_ROOT}/model/DeepSeek-V4-Flash", r"first three MoE layers by token hash"),
])
def test_unsupported_ids_are_refused_with_their_reason(model_id, reason):
  with pytest.raises(ValueError, match=reason):
    models.from_hf_id(model_id)


def test_every_unsupported_entry_has_a_source_and_shadows_no_table_entry():
  for model_id, entry in hf_models.unsupported().items():
    assert entry["reason"].strip() and entry["source"].strip()
    with pytest.raises(ValueError, match="no architecture in the model table"):
      models.from_hf_id(model_id)
