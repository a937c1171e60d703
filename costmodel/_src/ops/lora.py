"""LoRA training of the actor: the spec and its formulas.

LoRA (Hu et al., ICLR'22) freezes the base weights ``W`` (d_in x d_out) of
the target linear layers and trains ``B A`` with ``A`` (d_in x r) and ``B``
(r x d_out): ``r (d_in + d_out)`` parameters per target.

Per token, with ``G = 2 x (base GEMM parameters)`` forward FLOPs of the
weight GEMMs and ``a`` the adapters' share of them:

* forward: ``G (1 + a)`` (the adapters run beside the frozen GEMMs);
* backward, activation gradients: ``G (1 + a)`` (still needed through every
  frozen layer to reach the adapters below it);
* backward, weight gradients: ``G a`` only (none for the frozen base, ``G``
  in full fine-tuning).

So the GEMMs cost ``(2 + 3a) G`` instead of ``3 G``: about 2/3 of full
fine-tuning's forward + backward, and 1/2 of its backward alone (full
recompute adds one forward to both). The attention core has no weights: its
backward is unchanged. Memory: the frozen base keeps only its weights
(``param_bytes``, sharded as the layout shards weights), the adapters carry
weights, gradients and optimizer state; activations are kept as in full
fine-tuning. The reference model is the base with the adapters switched off,
so with ``shared_reference`` it holds no weights of its own where it sits on
the actor's pool. The weight sync moves the adapters only, or the merged
weights where the engine cannot serve adapters (``sync="merged"``).
"""

from __future__ import annotations

from costmodel._src import pytree
from costmodel._src.specs.model import ModelSpec

TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
"""Target linear layers of a decoder block (``all-linear`` is all of them)."""
SYNC_MODES = ("adapters", "merged")


@pytree.pytree_dataclass
class LoRA:
  """LoRA training of the actor (``RLJob.lora``).

  Attributes:
    rank: Adapter rank r.
    targets: Target linear layers, a subset of :data:`TARGETS` (``gate`` is
      absent from non-gated MLPs such as OPT's).
    shared_reference: The reference is the frozen base with the adapters
      off (veRL's LoRA path); False keeps a separate reference copy
      (DeepSpeed-Chat loads one).
    sync: ``adapters``: the weight sync sends the adapters only (engines
      that serve LoRA); ``merged``: the merged weights, as full fine-tuning.
  """

  rank: float = pytree.static_field(default=32.0)
  targets: tuple[str, ...] = pytree.static_field(default=TARGETS)
  shared_reference: bool = pytree.static_field(default=True)
  sync: str = pytree.static_field(default="adapters")

  def __post_init__(self):
    if isinstance(self.targets, str):
      object.__setattr__(self, "targets", (self.targets,))
    object.__setattr__(self, "targets", tuple(self.targets))
    pytree.check_number("LoRA", 1, rank=self.rank)
    bad = [t for t in self.targets if t not in TARGETS]
    if bad or not self.targets:
      raise ValueError(f"LoRA: targets={self.targets!r} must be a non-empty subset of "
                       f"{TARGETS}")
    pytree.check_one_of("LoRA", SYNC_MODES, sync=self.sync)


ATTENTION_TARGETS = ("q", "k", "v", "o")


def _target_shapes(model: ModelSpec, ffn: int, copies: int, attention: bool,
                   width: int = 0) -> dict[str, tuple[int, int, int]]:
  """Target -> (d_in, d_out, copies) of one block: its attention (when
  ``attention``) and ``copies`` MLPs of width ``ffn`` on inputs of ``width``
  (default ``h``; routed experts: :attr:`ModelSpec.expert_width`)."""
  h = model.hidden
  shapes = {}
  if attention:
    kv_out = model.n_kv_heads * model.head_dim
    shapes = {"q": (h, model.n_heads * model.qk_head_dim, 1), "k": (h, kv_out, 1),
              "v": (h, kv_out, 1), "o": (model.n_heads * model.value_head_dim, h, 1)}
  if copies and ffn:
    w = width or h
    shapes.update({"up": (w, ffn, copies), "down": (ffn, w, copies)})
    if model.gated_mlp:
      shapes["gate"] = (w, ffn, copies)
  return shapes


def _blocks(model: ModelSpec, active: bool) -> list[tuple[int, int, int, bool, int]]:
  """(layers, MLP width, MLP copies, with attention, input width) of the model's blocks:
  the attention projections (every layer's but Mamba's and mixer-free
  blocks'), dense MLPs, MoE blocks' routed experts (top-k when ``active``)
  and their shared experts."""
  attention = model.n_layers - model.n_layers_of("mamba") - model.n_layers_of("mlp_only")
  out = [(attention, 0, 0, True, 0), (model.n_dense_layers, model.ffn_hidden, 1, False, 0)]
  if model.is_moe:
    out.append((model.n_moe_layers, model.expert_ffn_hidden,
                model.top_k if active else model.n_experts, False, model.expert_width))
    if model.shared_ffn_hidden:
      out.append((model.n_moe_layers, model.shared_ffn_hidden, 1, False, 0))
  return out


def _targets(model: ModelSpec, lora: LoRA, active: bool):
  for layers, ffn, copies, attention, width in _blocks(model, active):
    for t, (d_in, d_out, c) in _target_shapes(model, ffn, copies, attention, width).items():
      if t in lora.targets and layers:
        yield layers, d_in, d_out, c


def adapter_params(model: ModelSpec, lora: LoRA, active: bool = False) -> float:
  """Adapter parameters, ``r (d_in + d_out)`` per target, of the whole model
  (``active``: those a token uses, top-k experts)."""
  return float(sum(lora.rank * (i + o) * c * n for n, i, o, c in _targets(model, lora, active)))


def adapter_tensors(model: ModelSpec, lora: LoRA) -> int:
  """Adapter tensors (A and B per target): what a LoRA-only sync sends."""
  return int(sum(2 * c * n for n, _, _, c in _targets(model, lora, False)))


def gemm_share(model: ModelSpec, lora: LoRA) -> float:
  """``a``: adapter FLOPs per token over the base weight GEMMs' FLOPs per token."""
  return adapter_params(model, lora, active=True) / float(model.matmul_params_per_token)


def gemm_passes(model: ModelSpec, lora: LoRA, full_passes: float) -> float:
  """Weight-GEMM passes (in forwards of the base GEMMs) of one LoRA update.

  ``full_passes`` is full fine-tuning's (3, or 4 with full recompute): LoRA
  runs every pass on base + adapters, ``full_passes (1 + a)``, minus the
  frozen base's weight-gradient GEMMs (one forward's worth): ``2 + 3a``
  without recompute.
  """
  return full_passes * (1.0 + gemm_share(model, lora)) - 1.0


def sync_share(model: ModelSpec, lora: LoRA) -> float:
  """Bytes a weight sync moves relative to full weights (1 when merged)."""
  if lora.sync == "merged":
    return 1.0
  return adapter_params(model, lora) / float(model.total_params)
