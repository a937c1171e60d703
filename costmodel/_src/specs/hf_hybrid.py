"""``config.json`` readers of hybrid linear-attention models.

- ``qwen3_next``: Qwen3-Next (Gated DeltaNet layers with a gated full-attention
  layer every ``full_attention_interval``; every layer a 512-expert MoE with a
  shared expert).
- ``qwen3_5_text`` / ``qwen3_5_moe_text``: the language model of Qwen3.5,
  dense and MoE, under the ``text_config`` of the released multimodal
  checkpoints (``qwen3_5`` / ``qwen3_5_moe``).
- ``nemotron_h``: Nemotron-H, Nemotron Nano 2 and Nemotron 3 (Mamba-2 and
  attention blocks without an MLP, MLP and MoE blocks without a mixer; the
  order in ``hybrid_override_pattern``, ``M`` ``*`` ``-`` ``E``, or the
  ``layers_block_type`` list; Nemotron 3 Super's LatentMoE,
  ``moe_latent_size``). Key spellings and defaults follow vLLM's
  ``NemotronHConfig`` (vllm-project/vllm@a59ddf74,
  ``vllm/transformers_utils/configs/nemotron_h.py``), the weights
  Megatron-Core's ``MambaMixer`` (:mod:`mamba`); the MLPs are squared-ReLU
  (two matrices).

Key spellings follow ``transformers``' ``Qwen3NextConfig`` and vLLM's
``Qwen3_5TextConfig`` (vllm-project/vllm@c04143bb,
``vllm/transformers_utils/configs/qwen3_5.py``): layer ``i`` is full
attention when ``(i + 1) % full_attention_interval == 0`` unless
``layer_types`` lists the kinds. Left out of the spec (under 0.01% of the
parameters): the per-head q/k norms and the shared expert's one-unit gate.
"""

from __future__ import annotations

from typing import Any

from costmodel._src.specs import hf_families
from costmodel._src.specs.hf_reader import Reader

_KINDS = ("full_attention", "linear_attention")


def _mixers(r: Reader, n_layers: int, output_gate_key: bool) -> dict[str, Any]:
  if r.has("layer_types"):
    types = r.choice_list("layer_types", n_layers, _KINDS)
  else:
    every = r.integer("full_attention_interval")
    types = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
             for i in range(n_layers)]
  # Qwen3-Next's attention always gates its output (no key); Qwen3.5 names it.
  gate = r.flag("attn_output_gate", True) if output_gate_key else True
  r.number("partial_rotary_factor", 0.25, high=1.0)  # rotary width: no parameters
  return dict(
      layer_types=tuple(types), attn_output_gate=gate,
      linear_k_heads=r.integer("linear_num_key_heads"),
      linear_v_heads=r.integer("linear_num_value_heads"),
      linear_k_dim=r.integer("linear_key_head_dim"),
      linear_v_dim=r.integer("linear_value_head_dim"),
      linear_conv=r.integer("linear_conv_kernel_dim"),
  )


def _moe(r: Reader, n_layers: int) -> dict[str, Any]:
  n_experts = r.integer("num_experts")
  # Qwen3.5's MoE config drops these two keys (every layer sparse).
  step = r.integer("decoder_sparse_step") if r.has("decoder_sparse_step") else 1
  mlp_only = set(r.layer_list("mlp_only_layers", n_layers) if r.has("mlp_only_layers") else ())
  n_sparse = sum(1 for i in range(n_layers) if i not in mlp_only and (i + 1) % step == 0)
  n_dense = n_layers - n_sparse
  return dict(
      # Unused when every layer is sparse (Qwen3-Next names it, Qwen3.5 does not).
      ffn_hidden=r.integer("intermediate_size") if n_dense or r.has("intermediate_size") else 0,
      n_experts=n_experts,
      top_k=r.integer("num_experts_per_tok"),
      expert_ffn_hidden=r.integer("moe_intermediate_size"),
      shared_ffn_hidden=r.integer("shared_expert_intermediate_size", 0, minimum=0),
      first_dense_layers=n_dense,
  )


def _base(r: Reader) -> dict[str, Any]:
  # Qwen3.5's multi-token-prediction layers (a speculative-decoding draft), when named.
  mtp = r.integer("mtp_num_hidden_layers", minimum=0) if r.has("mtp_num_hidden_layers") else 0
  return dict(hf_families.attention(r), tied_embeddings=r.flag("tie_word_embeddings", False),
              qkv_bias=r.flag("attention_bias", False), mtp_layers=mtp)


def qwen3_next(r: Reader) -> dict[str, Any]:
  fields = _base(r)
  n = fields["n_layers"]
  return dict(fields, **_mixers(r, n, output_gate_key=False), **_moe(r, n))


def qwen3_5_text(r: Reader) -> dict[str, Any]:
  fields = _base(r)
  n = fields["n_layers"]
  return dict(fields, ffn_hidden=r.integer("intermediate_size"),
              **_mixers(r, n, output_gate_key=True))


def qwen3_5_moe_text(r: Reader) -> dict[str, Any]:
  fields = _base(r)
  n = fields["n_layers"]
  return dict(fields, **_mixers(r, n, output_gate_key=True), **_moe(r, n))


_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _blocks(r: Reader, n_layers: int) -> list[str]:
  """Block kind of each layer: ``layers_block_type`` or the pattern's letters."""
  if r.has("layers_block_type"):
    return r.choice_list("layers_block_type", n_layers, tuple(_BLOCKS.values()))
  pattern = r.get("hybrid_override_pattern")
  if (not isinstance(pattern, str) or len(pattern) != n_layers
      or any(c not in _BLOCKS for c in pattern)):
    raise ValueError(f"{r.source}: hybrid_override_pattern={pattern!r} must have one of "
                     f"{''.join(_BLOCKS)} for each of the {n_layers} layers")
  return [_BLOCKS[c] for c in pattern]


def nemotron_h(r: Reader) -> dict[str, Any]:
  hidden = r.integer("hidden_size")
  n_heads = r.integer("num_attention_heads")
  n_layers = r.integer("num_hidden_layers")
  blocks = _blocks(r, n_layers)
  head_dim = (r.integer("head_dim") if r.has("head_dim")
              else r.integer("attention_head_dim", hidden // n_heads))
  kinds = {"mamba": "mamba", "attention": "full_attention", "mlp": "mlp_only",
           "moe": "mlp_only"}
  fields = dict(
      n_layers=n_layers, hidden=hidden, n_heads=n_heads,
      n_kv_heads=r.integer("num_key_value_heads", n_heads), head_dim=head_dim,
      vocab=r.integer("vocab_size", 131072),
      tied_embeddings=r.flag("tie_word_embeddings", False), gated_mlp=False,
      layer_types=tuple(kinds[b] for b in blocks),
      mixer_only_layers=sum(1 for b in blocks if b in ("mamba", "attention")),
      ffn_hidden=r.integer("intermediate_size") if "mlp" in blocks else 0,
      mtp_layers=(r.integer("num_nextn_predict_layers", minimum=0)
                  if r.has("num_nextn_predict_layers") else 0),
  )
  if "mamba" in blocks:
    fields.update(
        mamba_heads=r.integer("mamba_num_heads", 128),
        mamba_head_dim=r.integer("mamba_head_dim", 64),
        mamba_state=r.integer("ssm_state_size", 128),
        mamba_groups=r.integer("n_groups", 8),
        mamba_conv=r.integer("conv_kernel", 4),
        mamba_chunk=r.integer("chunk_size", 256))
  if "moe" in blocks:
    moe_ffn = r.integer("moe_intermediate_size")
    n_shared = r.integer("n_shared_experts", 1, minimum=0)
    fields.update(
        n_experts=r.integer("n_routed_experts"), top_k=r.integer("num_experts_per_tok"),
        expert_ffn_hidden=moe_ffn,
        shared_ffn_hidden=(r.integer("moe_shared_expert_intermediate_size", moe_ffn * n_shared)
                           if n_shared else 0),
        first_dense_layers=blocks.count("mlp"),
        moe_latent=(r.integer("moe_latent_size") if r.has("moe_latent_size") else 0))
  return fields


PARSERS = {
    "nemotron_h": nemotron_h,
    "qwen3_next": qwen3_next,
    "qwen3_5_text": qwen3_5_text,
    "qwen3_5_moe_text": qwen3_5_moe_text,
}
TEXT_CONFIG_WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
