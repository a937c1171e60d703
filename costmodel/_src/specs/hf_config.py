"""Builds a :class:`ModelSpec` from a Hugging Face ``config.json``.

The file is read as plain JSON: no network and no ``transformers``. Key
spellings and defaults follow the ``transformers`` configuration classes of
each supported ``model_type``:

- ``llama``: Llama 2 / 3 / 3.1 (and ``seed_oss``, the same keys).
- ``qwen2``: Qwen2 and Qwen2.5 (biases on the Q, K and V projections), and
  ``mimo`` (MiMo-7B: Qwen2's keys plus ``num_nextn_predict_layers``).
- ``qwen3``: Qwen3 dense (no QKV bias).
- ``qwen3_moe``: Qwen3 mixture of experts (``num_experts``,
  ``moe_intermediate_size``, ``decoder_sparse_step``, ``mlp_only_layers``).
- ``mixtral``: Mixtral (``num_local_experts``), and ``minimax_m2`` (the same keys).
- ``deepseek_v2`` / ``deepseek_v3``: multi-head latent attention and shared
  experts (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``n_routed_experts``, ``first_k_dense_replace``, ...), also read for
  ``kimi_k2`` and GLM-4.7-Flash's ``glm4_moe_lite``. The multi-token
  prediction module (``num_nextn_predict_layers``) is not part of the spec.
- ``opt``: OPT (learned positions with two extra rows, biases everywhere,
  ``word_embed_proj_dim`` projections).

What the spec leaves out (each well under 0.01% of the parameters of the
presets): Qwen3's per-head Q/K RMSNorm weights, DeepSeek's router correction
bias, the output-projection and MLP biases of a Llama config with
``attention_bias``/``mlp_bias`` set, and OPT-350M's missing final LayerNorm.
A :class:`ModelSpec` records how many layers are dense in an MoE model, not
which ones, which is all the parameter and FLOP counts depend on.
"""

from __future__ import annotations

from collections.abc import Mapping
import json
import os
import pathlib
from typing import Any

from costmodel._src.specs import hf_families
from costmodel._src.specs import hf_hybrid
from costmodel._src.specs.hf_reader import REQUIRED
from costmodel._src.specs.hf_reader import Reader
from costmodel._src.specs.model import ModelSpec

SUPPORTED_MODEL_TYPES = (
    "llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "mimo", "deepseek_v2",
    "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe_lite", "glm_moe_dsa", "seed_oss",
    "minimax_m2", "opt", *hf_families.PARSERS, *hf_hybrid.PARSERS,
)

def _llama_like(r: Reader, bias_key: bool) -> dict[str, Any]:
  # Llama's `attention_bias` puts biases on q, k, v and o; only the first three
  # are modelled (the o bias is `hidden` parameters per layer).
  return dict(
      hf_families.attention(r),
      ffn_hidden=r.integer("intermediate_size"),
      tied_embeddings=r.flag("tie_word_embeddings", False),
      qkv_bias=r.flag("attention_bias", False) if bias_key else False,
  )


def _llama(r: Reader) -> dict[str, Any]:
  return _llama_like(r, bias_key=True)


def _qwen2(r: Reader) -> dict[str, Any]:
  # Qwen2 hard-codes bias=True on q_proj, k_proj and v_proj (no config key).
  # Its `sliding_window` applies only with `use_sliding_window`, off in every
  # released Qwen2.5 config; it is read as full attention.
  if r.strict:
    r.flag("use_sliding_window")
  return dict(_llama_like(r, bias_key=False), qkv_bias=True)


def _mimo(r: Reader) -> dict[str, Any]:
  # MiMo: Qwen2's layout plus multi-token-prediction layers (a draft, not in the count).
  return dict(_qwen2(r), mtp_layers=r.integer("num_nextn_predict_layers", 0, minimum=0))


def _qwen3(r: Reader) -> dict[str, Any]:
  return _llama_like(r, bias_key=True)


def _qwen3_moe(r: Reader) -> dict[str, Any]:
  fields = dict(hf_families.attention(r),
                tied_embeddings=r.flag("tie_word_embeddings", False),
                qkv_bias=r.flag("attention_bias", False))
  n_layers = fields["n_layers"]
  n_experts = r.integer("num_experts", 0, minimum=0)
  step = r.integer("decoder_sparse_step", 1)
  mlp_only = set(r.layer_list("mlp_only_layers", n_layers))
  # transformers' Qwen3MoeDecoderLayer: layer i is sparse when it is not in
  # mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step == 0.
  n_sparse = sum(1 for i in range(n_layers)
                 if n_experts > 0 and i not in mlp_only and (i + 1) % step == 0)
  n_dense = n_layers - n_sparse
  fields["ffn_hidden"] = r.integer("intermediate_size", REQUIRED if n_dense else 0,
                               minimum=1 if n_dense else 0)
  if n_sparse:
    fields.update(
        n_experts=n_experts,
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden=r.integer("moe_intermediate_size"),
        first_dense_layers=n_dense,
    )
  return fields


def _mixtral(r: Reader) -> dict[str, Any]:
  ffn = r.integer("intermediate_size")
  return dict(
      hf_families.attention(r),
      ffn_hidden=ffn,
      tied_embeddings=r.flag("tie_word_embeddings", False),
      n_experts=r.integer("num_local_experts"),
      top_k=r.integer("num_experts_per_tok"),
      expert_ffn_hidden=ffn,
  )


def _deepseek(r: Reader) -> dict[str, Any]:
  hidden = r.integer("hidden_size")
  n_heads = r.integer("num_attention_heads")
  n_layers = r.integer("num_hidden_layers")
  n_experts = r.integer("n_routed_experts", 0, minimum=0)
  first_k = r.integer("first_k_dense_replace", 0, minimum=0)
  freq = r.integer("moe_layer_freq", 1)
  # DeepseekV3DecoderLayer: layer i is MoE when n_routed_experts is set,
  # i >= first_k_dense_replace and i % moe_layer_freq == 0.
  n_moe = sum(1 for i in range(n_layers)
              if n_experts > 0 and i >= first_k and i % freq == 0)
  n_dense = n_layers - n_moe
  fields = dict(
      n_layers=n_layers,
      hidden=hidden,
      n_heads=n_heads,
      n_kv_heads=r.integer("num_key_value_heads", n_heads),
      head_dim=r.integer("qk_nope_head_dim"),
      qk_rope_head_dim=r.integer("qk_rope_head_dim"),
      v_head_dim=r.integer("v_head_dim"),
      q_lora_rank=r.integer("q_lora_rank", 0, minimum=0),  # null in V2-Lite
      kv_lora_rank=r.integer("kv_lora_rank"),
      vocab=r.integer("vocab_size"),
      tied_embeddings=r.flag("tie_word_embeddings", False),
      ffn_hidden=r.integer("intermediate_size", REQUIRED if n_dense else 0,
                       minimum=1 if n_dense else 0),
  )
  fields["mtp_layers"] = r.integer("num_nextn_predict_layers", 0, minimum=0)
  if r.cfg.get("model_type") in ("deepseek_v32", "glm_moe_dsa"):
    fields.update(index_heads=r.integer("index_n_heads"),
                  index_head_dim=r.integer("index_head_dim"),
                  index_topk=r.integer("index_topk"))
  if n_moe:
    moe_ffn = r.integer("moe_intermediate_size")
    fields.update(
        n_experts=n_experts,
        top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden=moe_ffn,
        shared_ffn_hidden=r.integer("n_shared_experts", 0, minimum=0) * moe_ffn,
        first_dense_layers=n_dense,
    )
  return fields


def _opt(r: Reader) -> dict[str, Any]:
  hidden = r.integer("hidden_size")
  n_heads = r.integer("num_attention_heads")
  if hidden % n_heads:
    raise ValueError(f"{r.source}: hidden_size={hidden} is not divisible by "
                     f"num_attention_heads={n_heads}")
  embed = r.integer("word_embed_proj_dim", hidden)
  r.flag("do_layer_norm_before", True)  # Pre/post-LN: same parameter count.
  return dict(
      n_layers=r.integer("num_hidden_layers"),
      hidden=hidden,
      n_heads=n_heads,
      n_kv_heads=n_heads,
      head_dim=hidden // n_heads,
      ffn_hidden=r.integer("ffn_dim"),
      vocab=r.integer("vocab_size"),
      gated_mlp=False,
      tied_embeddings=r.flag("tie_word_embeddings", True),
      linear_bias=r.flag("enable_bias", True),
      # OPTLearnedPositionalEmbedding keeps 2 extra rows (an offset of 2).
      learned_positions=r.integer("max_position_embeddings") + 2,
      embed_dim=0 if embed == hidden else embed,
  )


_PARSERS = {
    "llama": _llama,
    "qwen2": _qwen2,
    "mimo": _mimo,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "deepseek_v32": _deepseek,  # DeepSeek-V3.2: V3 plus the sparse-attention indexer
    "kimi_k2": _deepseek,  # Kimi K2: the DeepSeek-V3 layout, model_type of its own
    # GLM-4.7-Flash: DeepSeek-V3's latent attention and MoE keys (transformers' Glm4MoeLiteConfig).
    "glm4_moe_lite": _deepseek,
    # GLM-5 / 5.1: latent attention with DeepSeek-V3.2's sparse-attention indexer
    # (transformers' GlmMoeDsaConfig spells the keys as DeepSeek does).
    "glm_moe_dsa": _deepseek,
    # Seed-OSS: a Llama layout whose `attention_bias` puts biases on q, k and v
    # (transformers' SeedOssConfig; its output-projection bias is a separate,
    # unmodelled `attention_out_bias`).
    "seed_oss": _llama,
    # MiniMax-M2: Mixtral's keys (num_local_experts; intermediate_size is the
    # expert width, every layer sparse), transformers' MiniMaxM2Config. Its
    # per-layer q/k RMSNorm weights are left out.
    "minimax_m2": _mixtral,
    "opt": _opt,
    **hf_families.PARSERS,
    **hf_hybrid.PARSERS,
}
assert set(_PARSERS) == set(SUPPORTED_MODEL_TYPES)


def _load(config) -> tuple[Mapping[str, Any], str, str | None]:
  """Returns (config dict, source label for messages, fallback name)."""
  if isinstance(config, Mapping):
    return config, "config dict", None
  if not isinstance(config, (str, os.PathLike)):
    raise TypeError(f"config={config!r} must be a path or a dict")
  path = pathlib.Path(config)
  if path.is_dir():
    path = path / "config.json"
  try:
    text = path.read_text(encoding="utf-8")
  except FileNotFoundError:
    raise ValueError(f"config file {str(path)!r} does not exist") from None
  except OSError as e:
    raise ValueError(f"config file {str(path)!r} cannot be read: {e}") from None
  try:
    cfg = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: invalid JSON ({e})") from None
  if not isinstance(cfg, dict):
    raise ValueError(f"{path}: top-level JSON value must be an object, "
                     f"got {type(cfg).__name__}")
  stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem
  return cfg, str(path), stem


# Multimodal checkpoints whose language model sits under `text_config`.
_TEXT_CONFIG_WRAPPERS = {"gemma3": "gemma3_text", **hf_hybrid.TEXT_CONFIG_WRAPPERS}


def from_hf_config(config, name: str | None = None, strict: bool = False) -> ModelSpec:
  """Builds a :class:`ModelSpec` from a Hugging Face ``config.json``.

  Args:
    config: Path to a ``config.json`` (or to the directory holding one), or the
      already-loaded dict.
    name: Name of the spec. Defaults to the config's ``name_or_path`` or
      ``_name_or_path``, else the file stem (the directory name for a file
      called ``config.json``), else the ``model_type``.
    strict: Every key the family's reader asks for must be present (no
      ``transformers`` defaults) and every key present must be read; the
      shipped table of model facts is read this way.

  Returns:
    The architecture as a :class:`ModelSpec`.

  Raises:
    ValueError: for a missing or unreadable file, invalid JSON, an unsupported
      ``model_type`` (the message lists the supported ones), a missing required
      key, or a value of the wrong type or out of range; the message names the
      file (or "config dict"), the key and the value.
    TypeError: if ``config`` is neither a path nor a mapping.

  Example:
    >>> spec = from_hf_config({"model_type": "llama", "num_hidden_layers": 32,
    ...     "hidden_size": 4096, "num_attention_heads": 32,
    ...     "num_key_value_heads": 8, "intermediate_size": 14336,
    ...     "vocab_size": 128256}, name="llama-3.1-8b")
    >>> spec.total_params
    8030261248
  """
  cfg, source, fallback = _load(config)
  outer = cfg
  model_type = cfg.get("model_type")
  if (isinstance(model_type, str) and model_type.lower() in _TEXT_CONFIG_WRAPPERS
      and isinstance(cfg.get("text_config"), Mapping)):
    cfg = dict(cfg["text_config"])
    cfg.setdefault("model_type", _TEXT_CONFIG_WRAPPERS[model_type.lower()])
    source = f"{source} (text_config)"
    model_type = cfg["model_type"]
  if not isinstance(model_type, str) or model_type.lower() not in _PARSERS:
    raise ValueError(
        f"{source}: unsupported {model_type=}; supported model types: "
        f"{', '.join(SUPPORTED_MODEL_TYPES)}")
  model_type = model_type.lower()
  reader = Reader(cfg, source, strict=strict)
  fields = _PARSERS[model_type](reader)
  reader.check_all_read()
  cfg = outer
  if name is None:
    for key in ("name_or_path", "_name_or_path"):
      if isinstance(cfg.get(key), str) and cfg[key]:
        name = cfg[key]
        break
    else:
      name = fallback or model_type
  try:
    return ModelSpec(name=name, **fields)
  except ValueError as e:
    raise ValueError(f"{source}: {e}") from None
