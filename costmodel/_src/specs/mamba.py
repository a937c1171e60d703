"""Mamba-2 token mixer (state-space duality, SSD): parameters, FLOPs, state.

Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality" (ICML 2024,
arXiv:2405.21060). Shapes as ``config.json`` of Nemotron-H names them
(``mamba_num_heads`` H, ``mamba_head_dim`` P, ``ssm_state_size`` N,
``n_groups`` G, ``conv_kernel`` K, ``chunk_size`` Q) and as ``transformers``'
``Mamba2Mixer`` / ``NemotronHMamba2Mixer`` lay out the weights:

* inner width ``d = H P``;
* ``in_proj``: ``h -> z (d), xBC (d + 2 G N), dt (H)``, no bias;
* a depthwise causal convolution over xBC (``d + 2 G N`` channels, K taps,
  with bias);
* per head ``A_log``, ``D`` and ``dt_bias``;
* a gated RMSNorm over ``d`` and ``out_proj``: ``d -> h``.

FLOPs per token of the scan in the chunked SSD form (Section 6 of the paper,
chunks of Q tokens): within a chunk, ``C B^T`` per group (``2 Q N G``) and
the masked scores times X per head (``2 Q P H``); the chunk states ``B^T X``
and the output from the carried state ``C h`` (``2 N P H`` each); the
passing of states between chunks is ``H P N / Q`` per token and left out.
That is ``H (4 N P + 2 Q P) + 2 G Q N``. Decode runs the recurrence (state
update and read, ``~5 H P N``), counted with the same constant as the
projections dominate a token's work either way. The projections and the
convolution are weights, counted with the parameters (2 FLOPs each).

Per sequence a layer keeps the SSM state (``H P N`` elements) and the
convolution's last ``K - 1`` inputs (``(K - 1)(d + 2 G N)`` elements),
whatever the length; there is no KV cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from costmodel._src.specs.model import ModelSpec

FIELDS = ("mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_conv",
          "mamba_chunk")


def check(model: ModelSpec, owner: str) -> None:
  """Mamba layers need every shape field; heads must split into the groups."""
  if "mamba" not in model.layer_types:
    return
  if any(getattr(model, f) <= 0 for f in FIELDS):
    raise ValueError(f"{owner}: mamba layers need {', '.join(FIELDS)} > 0, got "
                     f"{[getattr(model, f) for f in FIELDS]}")
  if model.mamba_heads % model.mamba_groups:
    raise ValueError(f"{owner}: mamba_heads={model.mamba_heads} must be divisible by "
                     f"mamba_groups={model.mamba_groups}")


def inner(model: ModelSpec) -> int:
  """Inner width ``d = H P`` of one Mamba-2 layer."""
  return model.mamba_heads * model.mamba_head_dim


def conv_channels(model: ModelSpec) -> int:
  """Channels of the causal convolution (x, B, C): ``d + 2 G N``."""
  return inner(model) + 2 * model.mamba_groups * model.mamba_state


def params(model: ModelSpec) -> int:
  """Parameters of one Mamba-2 layer (its pre-norm excluded)."""
  if not model.mamba_heads:
    return 0
  h, d, heads = model.hidden, inner(model), model.mamba_heads
  in_proj = h * (d + conv_channels(model) + heads)
  conv = conv_channels(model) * (model.mamba_conv + 1)
  return in_proj + conv + 3 * heads + d + d * h


def scan_flops_per_token(model: ModelSpec) -> int:
  """SSD scan FLOPs per token of one layer (projections and convolution excluded)."""
  n, p, q = model.mamba_state, model.mamba_head_dim, model.mamba_chunk
  return model.mamba_heads * (4 * n * p + 2 * q * p) + 2 * model.mamba_groups * q * n


def state_elements(model: ModelSpec) -> int:
  """SSM state elements of one layer for one sequence: ``H P N``."""
  return model.mamba_heads * model.mamba_head_dim * model.mamba_state


def conv_state_elements(model: ModelSpec) -> int:
  """Convolution state elements of one layer for one sequence."""
  return (model.mamba_conv - 1) * conv_channels(model)


def activation_units(model: ModelSpec) -> float:
  """Stored activation bytes of one Mamba-2 layer per token, in units of ``h``.

  16-bit tensors as in Korthikanti et al.'s 11 ``s b h`` for attention: the
  input of ``in_proj`` (2h), its output (``2 (d + conv + H)``), the
  convolved x, B, C (``2 conv``), the scan output and the gated norm's output
  (``2 d`` each), and a 1-byte dropout mask (h). The chunk states are
  recomputed in the backward pass, not stored.
  """
  h, d, c = model.hidden, inner(model), conv_channels(model)
  stored = 2 * h + 2 * (d + c + model.mamba_heads) + 2 * c + 4 * d + h
  return stored / h
