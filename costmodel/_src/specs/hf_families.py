"""``config.json`` readers of the model families added after the first ones.

Key spellings follow the ``transformers`` configuration classes:

- ``mistral``: Mistral 7B / Nemo / Small (a Llama layout; ``sliding_window``
  set means every layer attends to that many keys).
- ``glm4``: GLM-4-0414 (biases on q, k, v; two extra norms per layer).
- ``gemma2`` / ``gemma3_text``: Gemma 2 and Gemma 3 text models (tied
  embeddings, sliding-window layers alternating with full ones: every other
  layer in Gemma 2, five of every six in Gemma 3).
- ``gpt_oss``: gpt-oss (biases on q, k, v and o; ``layer_types`` alternating
  128-token sliding windows with full attention; every layer a 32- or
  128-expert MoE).
- ``glm4_moe``: GLM-4.5 / 4.5-Air (GQA with q, k, v biases, DeepSeek-style
  shared expert and leading dense layers, one MTP layer).

What the spec leaves out (each under 0.1% of the parameters): Gemma's and
GLM-4's extra per-layer norms and Gemma 3's q/k norms, gpt-oss' attention
sinks and its output-projection and expert biases.
"""

from __future__ import annotations

from typing import Any

from costmodel._src.specs.hf_reader import Reader


def attention(r: Reader) -> dict[str, int]:
  """Layers, width, heads, KV heads, head width and vocabulary."""
  hidden = r.integer("hidden_size")
  n_heads = r.integer("num_attention_heads")
  n_kv_heads = r.integer("num_key_value_heads", n_heads)
  if n_heads % n_kv_heads:
    raise ValueError(f"{r.source}: num_attention_heads={n_heads} must be "
                     f"divisible by num_key_value_heads={n_kv_heads}")
  return dict(
      n_layers=r.integer("num_hidden_layers"),
      hidden=hidden,
      n_heads=n_heads,
      n_kv_heads=n_kv_heads,
      head_dim=r.head_dim(hidden, n_heads),
      vocab=r.integer("vocab_size"),
  )


def layer_pattern(r: Reader, n_layers: int, full_every: int) -> dict[str, Any]:
  """``layer_types`` and ``sliding_window`` of a sliding/full interleave.

  ``layer_types`` when the config lists it; else layer ``i`` is full when
  ``(i + 1) % full_every == 0`` (``transformers``' rule for Gemma 2 with 2
  and Gemma 3 with ``sliding_window_pattern``), sliding otherwise.
  """
  window = r.integer("sliding_window")
  if r.has("layer_types"):
    types = r.choice_list("layer_types", n_layers, ("full_attention", "sliding_attention"))
  else:
    types = ["full_attention" if (i + 1) % full_every == 0 else "sliding_attention"
             for i in range(n_layers)]
  return dict(layer_types=tuple(types), sliding_window=window)


def mistral(r: Reader) -> dict[str, Any]:
  fields = dict(attention(r), ffn_hidden=r.integer("intermediate_size"),
                tied_embeddings=r.flag("tie_word_embeddings", False))
  window = r.integer("sliding_window", 0, minimum=0)  # null in v0.2 and later
  if window:
    fields.update(layer_types=("sliding_attention",) * fields["n_layers"],
                  sliding_window=window)
  return fields


def glm4(r: Reader) -> dict[str, Any]:
  r.number("partial_rotary_factor", 1.0, high=1.0)  # rotary width: no parameters
  return dict(attention(r), ffn_hidden=r.integer("intermediate_size"),
              tied_embeddings=r.flag("tie_word_embeddings", False),
              qkv_bias=r.flag("attention_bias", False))


def gemma2(r: Reader) -> dict[str, Any]:
  fields = dict(attention(r), ffn_hidden=r.integer("intermediate_size"),
                tied_embeddings=r.flag("tie_word_embeddings", True),
                qkv_bias=r.flag("attention_bias", False))
  return dict(fields, **layer_pattern(r, fields["n_layers"], 2))


def gemma3_text(r: Reader) -> dict[str, Any]:
  fields = dict(attention(r), ffn_hidden=r.integer("intermediate_size"),
                tied_embeddings=r.flag("tie_word_embeddings", True),
                qkv_bias=r.flag("attention_bias", False))
  every = 6 if r.has("layer_types") else r.integer("sliding_window_pattern", 6)
  return dict(fields, **layer_pattern(r, fields["n_layers"], every))


def gpt_oss(r: Reader) -> dict[str, Any]:
  fields = attention(r)
  ffn = r.integer("intermediate_size")
  fields.update(
      ffn_hidden=ffn,
      tied_embeddings=r.flag("tie_word_embeddings", False),
      qkv_bias=r.flag("attention_bias", True),
      n_experts=r.integer("num_local_experts"),
      top_k=r.integer("num_experts_per_tok"),
      expert_ffn_hidden=ffn,
      **layer_pattern(r, fields["n_layers"], 2),
  )
  return fields


def glm4_moe(r: Reader) -> dict[str, Any]:
  fields = attention(r)
  n_layers = fields["n_layers"]
  first_k = r.integer("first_k_dense_replace", 0, minimum=0)
  if first_k > n_layers:
    raise ValueError(f"{r.source}: first_k_dense_replace={first_k} exceeds "
                     f"num_hidden_layers={n_layers}")
  moe_ffn = r.integer("moe_intermediate_size")
  r.number("partial_rotary_factor", 1.0, high=1.0)
  r.flag("use_qk_norm", False)  # per-head q/k RMSNorm: 2 * head_dim weights
  fields.update(
      ffn_hidden=r.integer("intermediate_size"),
      tied_embeddings=r.flag("tie_word_embeddings", False),
      qkv_bias=r.flag("attention_bias", False),
      n_experts=r.integer("n_routed_experts"),
      top_k=r.integer("num_experts_per_tok"),
      expert_ffn_hidden=moe_ffn,
      shared_ffn_hidden=r.integer("n_shared_experts", 0, minimum=0) * moe_ffn,
      first_dense_layers=first_k,
      mtp_layers=r.integer("num_nextn_predict_layers", 0, minimum=0),
  )
  return fields


PARSERS = {
    "mistral": mistral,
    "glm4": glm4,
    "gemma2": gemma2,
    "gemma3_text": gemma3_text,
    "gpt_oss": gpt_oss,
    "glm4_moe": glm4_moe,
}
