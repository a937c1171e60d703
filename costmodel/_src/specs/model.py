"""Decoder model specification: dense and MoE, GQA and MLA, hybrid mixers.

A :class:`ModelSpec` holds the architecture only (no weights), as static
pytree structure: jitted cost functions specialise on it once. Parameter
counts follow the Hugging Face implementations of the families it reads.
"""

from __future__ import annotations

import dataclasses

from costmodel._src import pytree
from costmodel._src.specs import mamba
from costmodel._src.specs import mixers
from costmodel._src.specs import model_checks
from costmodel._src.specs.model_checks import LAYER_TYPES


@pytree.pytree_dataclass
class ModelSpec:
  """A decoder-only transformer.

  Attributes:
    name: Human-readable name.
    n_layers: Number of transformer blocks.
    hidden: Model width h.
    n_heads: Query heads.
    n_kv_heads: Key/value heads (GQA); equal to ``n_heads`` for MHA.
    head_dim: Per-head width of queries and keys (and values, without MLA).
    ffn_hidden: Intermediate width of the dense MLP.
    vocab: Vocabulary size.
    gated_mlp: SwiGLU-style MLP with three matrices (else two).
    tied_embeddings: LM head shares the input embedding.
    qkv_bias: Biases on the Q, K and V projections (Qwen2).
    linear_bias: Biases on every linear layer and LayerNorm (OPT).
    learned_positions: Rows of a learned position embedding (OPT), else 0.
    n_experts: Routed experts per MoE layer; 0 for a dense model.
    top_k: Routed experts per token.
    expert_ffn_hidden: Intermediate width of one routed expert.
    shared_ffn_hidden: Total intermediate width of the shared experts.
    first_dense_layers: Leading layers with a dense MLP in an MoE model.
    q_lora_rank: MLA query compression rank (0: no query compression).
    kv_lora_rank: MLA key/value compression rank; > 0 switches MLA on.
    qk_rope_head_dim: MLA decoupled rotary key width.
    v_head_dim: MLA value head width (defaults to ``head_dim``).
    embed_dim: Width of the token embedding and LM head when it differs from
      ``hidden`` (OPT-350M's ``word_embed_proj_dim``); the model then carries
      bias-free projections in and out (``2 * embed_dim * hidden``). 0 means
      ``hidden``.
    layer_types: Token mixer of each layer as ``config.json`` names it
      (``full_attention``, ``sliding_attention``, ``linear_attention``,
      ``mamba``; ``mlp_only`` for a block without one); empty means full
      attention in every layer.
    mixer_only_layers: Blocks with a token mixer and no MLP (Nemotron-H's
      ``M`` and ``*`` blocks, each one sublayer with one norm).
    mamba_heads, mamba_head_dim, mamba_state, mamba_groups, mamba_conv, mamba_chunk:
      Mamba-2 heads, head width, state size, B/C groups, convolution taps and
      scan chunk (:mod:`mamba`).
    moe_latent: Width the routed experts work in (LatentMoE: projections
      ``h -> moe_latent`` before dispatch and back after combine); 0: ``h``.
    sliding_window: Keys a ``sliding_attention`` layer attends to.
    linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim, linear_conv:
      Gated DeltaNet (linear attention) key and value heads, their widths and
      the causal convolution's kernel length.
    attn_output_gate: Full attention with a sigmoid output gate (the query
      projection doubles: Qwen3-Next, Qwen3.5).
    index_heads, index_head_dim, index_topk: DeepSeek sparse attention: the
      lightning indexer's heads and width, and the keys each query attends
      to (0: dense attention).
    mtp_layers: Multi-token-prediction modules shipped with the model (not
      counted in its parameters; a speculative-decoding draft).
  """

  name: str = pytree.static_field()
  n_layers: int = pytree.static_field()
  hidden: int = pytree.static_field()
  n_heads: int = pytree.static_field()
  n_kv_heads: int = pytree.static_field()
  head_dim: int = pytree.static_field()
  ffn_hidden: int = pytree.static_field()
  vocab: int = pytree.static_field()
  gated_mlp: bool = pytree.static_field(default=True)
  tied_embeddings: bool = pytree.static_field(default=False)
  qkv_bias: bool = pytree.static_field(default=False)
  linear_bias: bool = pytree.static_field(default=False)
  learned_positions: int = pytree.static_field(default=0)
  n_experts: int = pytree.static_field(default=0)
  top_k: int = pytree.static_field(default=0)
  expert_ffn_hidden: int = pytree.static_field(default=0)
  shared_ffn_hidden: int = pytree.static_field(default=0)
  first_dense_layers: int = pytree.static_field(default=0)
  q_lora_rank: int = pytree.static_field(default=0)
  kv_lora_rank: int = pytree.static_field(default=0)
  qk_rope_head_dim: int = pytree.static_field(default=0)
  v_head_dim: int = pytree.static_field(default=0)
  embed_dim: int = pytree.static_field(default=0)
  layer_types: tuple[str, ...] = pytree.static_field(default=())
  sliding_window: int = pytree.static_field(default=0)
  linear_k_heads: int = pytree.static_field(default=0)
  linear_v_heads: int = pytree.static_field(default=0)
  linear_k_dim: int = pytree.static_field(default=0)
  linear_v_dim: int = pytree.static_field(default=0)
  linear_conv: int = pytree.static_field(default=0)
  attn_output_gate: bool = pytree.static_field(default=False)
  index_heads: int = pytree.static_field(default=0)
  index_head_dim: int = pytree.static_field(default=0)
  index_topk: int = pytree.static_field(default=0)
  mtp_layers: int = pytree.static_field(default=0)
  mixer_only_layers: int = pytree.static_field(default=0)
  mamba_heads: int = pytree.static_field(default=0)
  mamba_head_dim: int = pytree.static_field(default=0)
  mamba_state: int = pytree.static_field(default=0)
  mamba_groups: int = pytree.static_field(default=0)
  mamba_conv: int = pytree.static_field(default=0)
  mamba_chunk: int = pytree.static_field(default=0)
  moe_latent: int = pytree.static_field(default=0)

  def __post_init__(self):
    model_checks.check(self)

  # ----- structure ---------------------------------------------------------

  def n_layers_of(self, kind: str) -> int:
    """Layers whose token mixer is ``kind`` (one of ``LAYER_TYPES``)."""
    if kind not in LAYER_TYPES:
      raise ValueError(f"kind={kind!r} must be one of {LAYER_TYPES}")
    if not self.layer_types:
      return self.n_layers if kind == "full_attention" else 0
    return sum(1 for t in self.layer_types if t == kind)

  @property
  def n_softmax_layers(self) -> int:
    """Layers with softmax attention (full or sliding): the ones holding a KV cache."""
    return self.n_layers_of("full_attention") + self.n_layers_of("sliding_attention")

  @property
  def n_mixer_layers(self) -> int:
    """Layers with a token mixer (all but ``mlp_only`` blocks)."""
    return self.n_layers - self.n_layers_of("mlp_only")

  @property
  def n_mlp_layers(self) -> int:
    """Layers with an MLP or MoE block (all but the mixer-only blocks)."""
    return self.n_layers - self.mixer_only_layers

  @property
  def n_sublayers(self) -> int:
    """Token mixers plus MLPs: the residual branches, each with its pre-norm."""
    return self.n_mixer_layers + self.n_mlp_layers

  @property
  def is_moe(self) -> bool:
    return self.n_experts > 0

  @property
  def is_mla(self) -> bool:
    return self.kv_lora_rank > 0

  @property
  def n_moe_layers(self) -> int:
    return self.n_mlp_layers - self.first_dense_layers if self.is_moe else 0

  @property
  def n_dense_layers(self) -> int:
    return self.n_mlp_layers - self.n_moe_layers

  @property
  def expert_width(self) -> int:
    """Input and output width of a routed expert (``moe_latent`` or ``h``)."""
    return self.moe_latent or self.hidden

  @property
  def state_heads(self) -> int:
    """Heads the recurrent state splits by under TP (DeltaNet value or Mamba heads)."""
    return max(self.linear_v_heads, self.mamba_heads, 1)

  @property
  def value_head_dim(self) -> int:
    return self.v_head_dim or self.head_dim

  @property
  def token_embed_dim(self) -> int:
    """Width of the token embedding and LM head."""
    return self.embed_dim or self.hidden

  def _embed_projection_params(self) -> int:
    e = self.token_embed_dim
    return 0 if e == self.hidden else 2 * e * self.hidden

  @property
  def qk_head_dim(self) -> int:
    """Query/key width per head used by the attention scores."""
    return self.head_dim + (self.qk_rope_head_dim if self.is_mla else 0)

  # ----- parameters --------------------------------------------------------

  def _norm_params(self) -> int:
    return 2 * self.hidden if self.linear_bias else self.hidden

  def attention_params(self) -> int:
    """Parameters of one attention block (projections and biases)."""
    h, a = self.hidden, self.n_heads
    if self.is_mla:
      qk = self.head_dim + self.qk_rope_head_dim
      if self.q_lora_rank:
        q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk
      else:
        q = h * a * qk
      kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            + self.kv_lora_rank * a * (self.head_dim + self.value_head_dim))
      o = a * self.value_head_dim * h
      return q + kv + o + self.indexer_params()
    q = h * a * self.head_dim * (2 if self.attn_output_gate else 1)
    kv = 2 * h * self.n_kv_heads * self.head_dim
    o = a * self.head_dim * h
    bias = 0
    if self.qkv_bias or self.linear_bias:
      bias += (a + 2 * self.n_kv_heads) * self.head_dim
    if self.linear_bias:
      bias += h
    return q + kv + o + bias

  def indexer_params(self) -> int:
    """DeepSeek sparse attention's lightning indexer in one layer.

    Query projection from the query latent, one shared key (with a LayerNorm's
    weight and bias) and a per-head weight from the hidden state.
    """
    if not self.index_topk:
      return 0
    ih, d = self.index_heads, self.index_head_dim
    q_in = self.q_lora_rank or self.hidden
    return q_in * ih * d + self.hidden * d + 2 * d + self.hidden * ih

  @property
  def linear_qk_width(self) -> int:
    """Width of the queries (and keys) of one Gated DeltaNet layer, all heads."""
    return self.linear_k_heads * self.linear_k_dim

  @property
  def linear_v_width(self) -> int:
    """Width of the values (and the output gate) of one Gated DeltaNet layer."""
    return self.linear_v_heads * self.linear_v_dim

  def linear_attention_params(self) -> int:
    """Parameters of one Gated DeltaNet layer (Qwen3-Next, Qwen3.5).

    Projections to q, k (``linear_qk_width`` each), v and the output gate z
    (``linear_v_width`` each), the per-head decay and step inputs (b, a); the
    depthwise causal convolution over q, k and v; per-head ``A_log`` and
    ``dt_bias``; the gated RMSNorm (one head width); the output projection.
    """
    if not self.linear_k_heads:
      return 0
    h, qk, v, nv = self.hidden, self.linear_qk_width, self.linear_v_width, self.linear_v_heads
    in_proj = h * (2 * qk + 2 * v) + h * 2 * nv
    conv = (2 * qk + v) * self.linear_conv
    return in_proj + conv + 2 * nv + self.linear_v_dim + v * h

  def _mlp_params(self, ffn: int, width: int = 0) -> int:
    width = width or self.hidden
    mats = 3 if self.gated_mlp else 2
    bias = (ffn + width) if self.linear_bias else 0
    return mats * width * ffn + bias

  def dense_mlp_params(self) -> int:
    """Parameters of one dense MLP."""
    return self._mlp_params(self.ffn_hidden)

  def expert_params(self) -> int:
    """Parameters of one routed expert."""
    return self._mlp_params(self.expert_ffn_hidden, self.expert_width) if self.is_moe else 0

  def moe_mlp_params(self, active: bool) -> int:
    """Parameters of one MoE block: router, routed experts (all or top-k), shared,
    and LatentMoE's projections to the latent width and back."""
    if not self.is_moe:
      return 0
    n = self.top_k if active else self.n_experts
    shared = self._mlp_params(self.shared_ffn_hidden) if self.shared_ffn_hidden else 0
    latent = 2 * self.hidden * self.moe_latent
    return self.hidden * self.n_experts + n * self.expert_params() + shared + latent

  def embedding_params(self) -> int:
    """Input embedding (plus learned positions and projections) and, if untied, the LM head."""
    e = self.token_embed_dim
    emb = self.vocab * e + self.learned_positions * self.hidden + self._embed_projection_params()
    return emb + (0 if self.tied_embeddings else self.vocab * e)

  def mixer_params(self) -> int:
    """Parameters of all token mixers (attention, DeltaNet and Mamba layers)."""
    return (self.n_softmax_layers * self.attention_params()
            + self.n_layers_of("linear_attention") * self.linear_attention_params()
            + self.n_layers_of("mamba") * mamba.params(self))

  def layer_params(self, active: bool = False) -> int:
    """Parameters of all blocks (all experts, or only active ones)."""
    dense = self.n_dense_layers * self.dense_mlp_params()
    moe = self.n_moe_layers * self.moe_mlp_params(active)
    return self.mixer_params() + self.n_sublayers * self._norm_params() + dense + moe

  @property
  def total_params(self) -> int:
    """All parameters."""
    return self.layer_params(False) + self.embedding_params() + self._norm_params()

  @property
  def active_params(self) -> int:
    """Parameters used per token (top-k routed experts only).

    Convention: the input embedding and the LM head both count as active, as
    in Mistral's 12.9B for Mixtral-8x7B and Qwen's activated counts. DeepSeek
    quotes 36.6B for V3 without the input embedding (0.9B); compare with
    ``active_params - vocab * token_embed_dim`` for that convention.
    """
    return self.layer_params(True) + self.embedding_params() + self._norm_params()

  @property
  def expert_params_total(self) -> int:
    """Parameters of all routed experts (sharded by expert parallelism)."""
    return self.n_moe_layers * self.n_experts * self.expert_params()

  @property
  def n_tensors(self) -> int:
    """Number of weight tensors (what per-tensor weight-sync overheads scale with)."""
    attn = 10 if self.is_mla else 4 + (3 if (self.qkv_bias or self.linear_bias) else 0)
    mlp = 3 if self.gated_mlp else 2
    if self.index_topk:
      attn += 5  # the indexer's wq_b, wk, k_norm (weight, bias), weights_proj
    per_moe = 1 + self.n_experts * mlp + (mlp if self.shared_ffn_hidden else 0) + (
        2 if self.moe_latent else 0)
    emb = (1 if self.tied_embeddings else 2) + (2 if self._embed_projection_params() else 0)
    # Gated DeltaNet: in_proj_qkvz, in_proj_ba, conv1d, A_log, dt_bias, norm, out_proj;
    # Mamba-2: in_proj, conv1d weight and bias, A_log, D, dt_bias, norm, out_proj.
    mixers = (self.n_softmax_layers * attn + self.n_layers_of("linear_attention") * 7
              + self.n_layers_of("mamba") * 8)
    return (mixers + self.n_sublayers + self.n_dense_layers * mlp + self.n_moe_layers * per_moe
            + emb + 1)

  # ----- FLOPs and bytes -----------------------------------------------------

  @property
  def matmul_params_per_token(self) -> int:
    """Weights multiplied per token in a forward pass (active, with the LM head)."""
    return (self.layer_params(True) + self.vocab * self.token_embed_dim
            + self._embed_projection_params())

  def attention_flops_per_token(self, context: float) -> float:
    """Attention-core FLOPs per token per forward pass, all layers, by kind.

    ``2 * n_heads * (qk_dim + v_dim) * context`` per full-attention layer,
    where ``context`` is the number of keys attended (for a causal sequence of
    length s the mean is s/2 with FlashAttention skipping masked blocks);
    sliding-window, sparse and linear layers as in :mod:`mixers`.
    """
    if not (self.layer_types or self.index_topk):
      per_layer = 2 * self.n_heads * (self.qk_head_dim + self.value_head_dim)
      return self.n_layers * per_layer * context
    return mixers.attention_flops_per_token(self, context)

  def forward_flops_per_token(self, context: float) -> float:
    """Forward FLOPs per token: ``2 * matmul params + attention``."""
    return 2.0 * self.matmul_params_per_token + self.attention_flops_per_token(context)

  def training_flops_per_token(self, context: float) -> float:
    """Forward + backward FLOPs per token (3x forward), without recompute."""
    return 3.0 * self.forward_flops_per_token(context)

  def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
    """KV-cache bytes each token adds, over the softmax-attention layers.

    GQA: ``2 * L * n_kv_heads * head_dim * bytes``; MLA caches the compressed
    latent and the rotary key: ``L * (kv_lora_rank + qk_rope_head_dim) * bytes``
    (plus the sparse-attention indexer's key). Sliding-window layers count
    while the sequence is shorter than the window; linear-attention layers
    hold a fixed state instead (:func:`mixers.seq_cache_bytes` has both).
    """
    return mixers.growing_kv_bytes_per_token(self, bytes_per_element)

  def seq_cache_bytes(self, length, bytes_per_element: float = 2.0):
    """Cache bytes of one sequence of ``length`` tokens: KV by kind plus recurrent state."""
    return mixers.seq_cache_bytes(self, length, bytes_per_element)

  @classmethod
  def from_hf_config(cls, config) -> ModelSpec:
    """Builds a spec from a Hugging Face ``config.json`` (a path or a dict).

    Reads Llama, Qwen2/2.5/3, Qwen3-MoE, Mixtral, DeepSeek-V3 and OPT key
    spellings; no network, no ``transformers``.

    Raises:
      ValueError: for a missing file, malformed JSON, an unsupported
        ``model_type`` or a missing or invalid field (named in the message).
    """
    from costmodel._src.specs import hf_config  # pylint: disable=g-import-not-at-top
    return hf_config.from_hf_config(config)

  def replace(self, **changes) -> ModelSpec:
    return dataclasses.replace(self, **changes)
