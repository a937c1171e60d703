"""The rules a :class:`~costmodel._src.specs.model.ModelSpec`'s fields obey:
integer widths, heads divisible by key/value heads, MoE and MLA fields that
need each other, layer kinds and the fields each kind needs."""

from __future__ import annotations

from costmodel._src import pytree

LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")


def check(spec) -> None:
  """Refuses a :class:`~costmodel._src.specs.model.ModelSpec` whose fields
  break a rule, naming the field, its value and the rule."""
  owner = f"ModelSpec({spec.name!r})"
  pytree.check_integer(owner, 1, rule="a positive integer", **{f: getattr(spec, f) for f in (
      "n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "vocab")})
  pytree.check_integer(owner, 0, rule="a non-negative integer", **{f: getattr(spec, f) for f in (
      "ffn_hidden", "learned_positions", "n_experts", "top_k", "expert_ffn_hidden",
      "shared_ffn_hidden", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
      "qk_rope_head_dim", "v_head_dim", "embed_dim", "sliding_window", "linear_k_heads",
      "linear_v_heads", "linear_k_dim", "linear_v_dim", "linear_conv", "index_heads",
      "index_head_dim", "index_topk", "mtp_layers")})
  _check_layer_types(spec, owner)
  if spec.n_heads % spec.n_kv_heads:
    raise ValueError(
        f"{owner}: n_heads={spec.n_heads} must be divisible by "
        f"n_kv_heads={spec.n_kv_heads}")
  if spec.n_experts:
    if not 1 <= spec.top_k <= spec.n_experts:
      raise ValueError(
          f"{owner}: top_k={spec.top_k} must lie in [1, n_experts={spec.n_experts}]")
    if spec.expert_ffn_hidden <= 0:
      raise ValueError(f"{owner}: expert_ffn_hidden={spec.expert_ffn_hidden} "
                       "must be > 0 for an MoE model")
    if spec.first_dense_layers > spec.n_layers:
      raise ValueError(f"{owner}: first_dense_layers={spec.first_dense_layers} "
                       f"exceeds n_layers={spec.n_layers}")
  elif spec.top_k:
    raise ValueError(f"{owner}: top_k={spec.top_k} needs n_experts > 0")
  if (spec.n_experts == 0 or spec.first_dense_layers) and spec.ffn_hidden <= 0:
    raise ValueError(f"{owner}: ffn_hidden={spec.ffn_hidden} must be > 0")
  if spec.q_lora_rank and not spec.kv_lora_rank:
    raise ValueError(f"{owner}: q_lora_rank={spec.q_lora_rank} needs kv_lora_rank > 0 (MLA)")

def _check_layer_types(spec, owner: str) -> None:
  types = spec.layer_types
  if not isinstance(types, tuple) or (types and len(types) != spec.n_layers) or any(
      t not in LAYER_TYPES for t in types):
    raise ValueError(f"{owner}: layer_types={types!r} must be empty or a tuple of "
                     f"n_layers={spec.n_layers} names from {LAYER_TYPES}")
  if "sliding_attention" in types and spec.sliding_window <= 0:
    raise ValueError(f"{owner}: sliding_window={spec.sliding_window} must be > 0 "
                     "with sliding_attention layers")
  linear = ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
            "linear_conv")
  if "linear_attention" in types and any(getattr(spec, f) <= 0 for f in linear):
    raise ValueError(f"{owner}: linear_attention layers need {', '.join(linear)} > 0, got "
                     f"{[getattr(spec, f) for f in linear]}")
  if "linear_attention" in types and spec.linear_v_heads % spec.linear_k_heads:
    raise ValueError(f"{owner}: linear_v_heads={spec.linear_v_heads} must be divisible by "
                     f"linear_k_heads={spec.linear_k_heads}")
  if spec.index_topk and (spec.index_heads <= 0 or spec.index_head_dim <= 0):
    raise ValueError(f"{owner}: index_topk={spec.index_topk} needs index_heads and "
                     "index_head_dim > 0")
