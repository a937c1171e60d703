"""The rules a :class:`~costmodel._src.specs.model.ModelSpec`'s fields obey:
integer widths, heads divisible by key/value heads, MoE and MLA fields that
need each other, layer kinds and the fields each kind needs (every error names
the field, its value and the rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel._src import pytree
from costmodel._src.specs import mamba

if TYPE_CHECKING:
  from costmodel._src.specs.model import ModelSpec

LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention", "mamba", "mlp_only")


def check(model: ModelSpec) -> None:
  """Raises ValueError for the first field that breaks its rule."""
  owner = f"ModelSpec({model.name!r})"
  pytree.check_integer(owner, 1, rule="a positive integer", **{f: getattr(model, f) for f in (
      "n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "vocab")})
  pytree.check_integer(owner, 0, rule="a non-negative integer", **{f: getattr(model, f) for f in (
      "ffn_hidden", "learned_positions", "n_experts", "top_k", "expert_ffn_hidden",
      "shared_ffn_hidden", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
      "qk_rope_head_dim", "v_head_dim", "embed_dim", "sliding_window", "linear_k_heads",
      "linear_v_heads", "linear_k_dim", "linear_v_dim", "linear_conv", "index_heads",
      "index_head_dim", "index_topk", "mtp_layers", "mixer_only_layers", *mamba.FIELDS,
      "moe_latent")})
  _check_layer_types(model, owner)
  if model.n_heads % model.n_kv_heads:
    raise ValueError(
        f"{owner}: n_heads={model.n_heads} must be divisible by "
        f"n_kv_heads={model.n_kv_heads}")
  if model.n_experts:
    if not 1 <= model.top_k <= model.n_experts:
      raise ValueError(
          f"{owner}: top_k={model.top_k} must lie in [1, n_experts={model.n_experts}]")
    if model.expert_ffn_hidden <= 0:
      raise ValueError(f"{owner}: expert_ffn_hidden={model.expert_ffn_hidden} "
                       "must be > 0 for an MoE model")
    if model.first_dense_layers > model.n_mlp_layers:
      raise ValueError(f"{owner}: first_dense_layers={model.first_dense_layers} "
                       f"exceeds the {model.n_mlp_layers} layers with an MLP")
  elif model.top_k:
    raise ValueError(f"{owner}: top_k={model.top_k} needs n_experts > 0")
  if model.n_dense_layers and model.ffn_hidden <= 0:
    raise ValueError(f"{owner}: ffn_hidden={model.ffn_hidden} must be > 0")
  if model.q_lora_rank and not model.kv_lora_rank:
    raise ValueError(f"{owner}: q_lora_rank={model.q_lora_rank} needs kv_lora_rank > 0 (MLA)")


def _check_layer_types(model: ModelSpec, owner: str) -> None:
  types = model.layer_types
  if not isinstance(types, tuple) or (types and len(types) != model.n_layers) or any(
      t not in LAYER_TYPES for t in types):
    raise ValueError(f"{owner}: layer_types={types!r} must be empty or a tuple of "
                     f"n_layers={model.n_layers} names from {LAYER_TYPES}")
  if "sliding_attention" in types and model.sliding_window <= 0:
    raise ValueError(f"{owner}: sliding_window={model.sliding_window} must be > 0 "
                     "with sliding_attention layers")
  linear = ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
            "linear_conv")
  if "linear_attention" in types and any(getattr(model, f) <= 0 for f in linear):
    raise ValueError(f"{owner}: linear_attention layers need {', '.join(linear)} > 0, got "
                     f"{[getattr(model, f) for f in linear]}")
  if "linear_attention" in types and model.linear_v_heads % model.linear_k_heads:
    raise ValueError(f"{owner}: linear_v_heads={model.linear_v_heads} must be divisible by "
                     f"linear_k_heads={model.linear_k_heads}")
  if model.index_topk and (model.index_heads <= 0 or model.index_head_dim <= 0):
    raise ValueError(f"{owner}: index_topk={model.index_topk} needs index_heads and "
                     "index_head_dim > 0")
  if model.mixer_only_layers > model.n_mixer_layers:
    raise ValueError(f"{owner}: mixer_only_layers={model.mixer_only_layers} exceeds the "
                     f"{model.n_mixer_layers} layers with a token mixer")
  mamba.check(model, owner)
