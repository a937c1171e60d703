"""A model's architecture from the Megatron-LM flags a launch script passes.

slime's launch scripts ``source`` a model file (``scripts/models/*.sh``) whose
``MODEL_ARGS`` state the architecture as Megatron-LM flags (``--num-layers``,
``--hidden-size``, ``--num-experts``, ``--kv-lora-rank``, ...). Those flags are
the architecture the run trains, so they are read as a :class:`ModelSpec`
(flag names and defaults of Megatron-LM's ``arguments.py``: biases on unless
``--disable-bias-linear``, tied embeddings unless
``--untie-embeddings-and-output-weights``, ``--ffn-hidden-size`` 4h, heads of
width h / heads unless ``--kv-channels``).
"""

from __future__ import annotations

import ast
import re

import costmodel as cm

# Flags that state a model file is present (without them the flags name no architecture).
_REQUIRED = ("num-layers", "hidden-size", "num-attention-heads", "vocab-size")


def _int(o: dict, key: str, framework: str, default: int | None = None) -> int:
  v = o.get(key, default)
  try:
    return int(v)
  except (TypeError, ValueError):
    raise ValueError(f"{framework}: --{key}={v!r} must be an integer") from None


def first_dense_layers(freq, n_layers: int, framework: str) -> int:
  """Leading dense layers of ``--moe-layer-freq``: ``1`` (every layer MoE), a list
  ``[0,0,1,...]`` or an expression ``([0]*3+[1]*58)``."""
  if freq is None:
    return 0
  text = str(freq).strip()
  m = re.fullmatch(r"\(?\s*(?:\[0\]\s*\*\s*(\d+)\s*\+\s*)?\[1\]\s*\*\s*(\d+)\s*\)?", text)
  if m:
    return int(m.group(1) or 0)
  try:
    v = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    raise ValueError(f"{framework}: --moe-layer-freq={freq!r} is not an integer, a list of 0/1 "
                     "or ([0]*k+[1]*m)") from None
  if isinstance(v, int):
    if v != 1:
      raise ValueError(f"{framework}: --moe-layer-freq={v}: the cost model's MoE layers are "
                       "the layers after the leading dense ones (frequency 1)")
    return 0
  layers = list(v)
  k = next((i for i, x in enumerate(layers) if x), len(layers))
  if any(not x for x in layers[k:]) or len(layers) != n_layers:
    raise ValueError(f"{framework}: --moe-layer-freq={freq!r}: the cost model's MoE layers are "
                     f"the layers after the leading dense ones, {n_layers} in all")
  return k


def model_from_flags(o: dict, name: str, framework: str) -> cm.ModelSpec | None:
  """The architecture the Megatron-LM flags ``o`` state, or None when they state none."""
  if any(k not in o for k in _REQUIRED):
    return None
  hidden, heads = _int(o, "hidden-size", framework), _int(o, "num-attention-heads", framework)
  n_layers = _int(o, "num-layers", framework)
  kv = _int(o, "num-query-groups", framework, heads) if o.get("group-query-attention") else heads
  mla = bool(o.get("multi-latent-attention"))
  f = dict(
      name=name, n_layers=n_layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
      head_dim=_int(o, "qk-head-dim" if mla else "kv-channels", framework, hidden // heads),
      ffn_hidden=_int(o, "ffn-hidden-size", framework, 4 * hidden),
      vocab=_int(o, "vocab-size", framework), gated_mlp=bool(o.get("swiglu")),
      tied_embeddings=not o.get("untie-embeddings-and-output-weights"),
      qkv_bias=bool(o.get("add-qkv-bias")), linear_bias=not o.get("disable-bias-linear"))
  if mla:
    f.update(n_kv_heads=heads, q_lora_rank=_int(o, "q-lora-rank", framework, 0),
             kv_lora_rank=_int(o, "kv-lora-rank", framework),
             qk_rope_head_dim=_int(o, "qk-pos-emb-head-dim", framework),
             v_head_dim=_int(o, "v-head-dim", framework))
  experts = _int(o, "num-experts", framework, 0)
  if experts:
    f.update(n_experts=experts, top_k=_int(o, "moe-router-topk", framework, 2),
             expert_ffn_hidden=_int(o, "moe-ffn-hidden-size", framework, f["ffn_hidden"]),
             shared_ffn_hidden=_int(o, "moe-shared-expert-intermediate-size", framework, 0),
             first_dense_layers=first_dense_layers(o.get("moe-layer-freq"), n_layers, framework))
  return cm.ModelSpec(**f)
