"""Number formats of weights, GEMMs and the KV cache, per role and phase.

A :class:`Precision` rides on each layout (``Parallel.precision`` for a
role's training or inference phase, ``Engine.precision`` for generation):

* ``weights``: format the weights are stored and read in (memory bytes,
  weight reads of decode); ``None`` keeps the job's ``param_bytes``;
* ``compute``: format of the GEMM inputs: sets the peak (``Hardware``'s
  BF16, FP8 or FP4 figure) and the efficiency curve
  (:func:`efficiency.gemm_efficiency` with the format's own plateau,
  ``Efficiency.fp8_matmul_efficiency`` or ``fp4_matmul_efficiency``). In
  training, FP8 compute is Transformer-Engine style: BF16 weights and master
  copies, GEMM inputs cast with per-tensor scales (:func:`cast_bytes`);
* ``kv``: KV-cache format; ``None`` keeps the job's ``kv_bytes``;
* ``state``: format of the recurrent state of Mamba-2 and Gated DeltaNet
  layers (vLLM's ``mamba_ssm_cache_dtype``: ``MambaStateDtypeCalculator`` in
  ``vllm/model_executor/layers/mamba/mamba_utils.py`` sets the SSM state's
  dtype from it, the Gated DeltaNet state's too in the releases whose
  ``gated_delta_net_state_dtype`` takes it); ``None`` keeps the KV format, as
  ``"auto"`` does. The convolution state stays at the KV format.

Attention cores and element-wise kernels stay in BF16.

References: Micikevicius et al. 2022, "FP8 Formats for Deep Learning";
NVIDIA Transformer Engine (delayed per-tensor scaling); DeepSeek-V3
(fine-grained FP8 scaling, its recipe only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel._src import pytree
from costmodel._src.specs.hardware import Hardware

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4")


@pytree.pytree_dataclass
class Precision:
  """Formats of one phase of one role (all static).

  Attributes:
    weights: Stored weight format, or None for the job's ``param_bytes``.
    compute: GEMM input format: ``bf16``, ``fp16``, ``fp8`` or ``fp4``.
    kv: KV-cache format, or None for the job's ``kv_bytes``.
    state: Recurrent-state format of Mamba-2 and Gated DeltaNet layers, or
      None for the KV format (``"fp32"``: vLLM's
      ``mamba_ssm_cache_dtype="float32"``).
  """

  weights: str | None = pytree.static_field(default=None)
  compute: str = pytree.static_field(default="bf16")
  kv: str | None = pytree.static_field(default=None)
  state: str | None = pytree.static_field(default=None)

  def __post_init__(self):
    pytree.check_one_of("Precision", (*DTYPE_BYTES, None), weights=self.weights, kv=self.kv,
                        state=self.state)
    pytree.check_one_of("Precision", COMPUTE_DTYPES, compute=self.compute)


BF16 = Precision()


def weight_bytes(precision: Precision, job_param_bytes: float) -> float:
  """Bytes per stored weight."""
  return job_param_bytes if precision.weights is None else DTYPE_BYTES[precision.weights]


def kv_bytes(precision: Precision, job_kv_bytes: float) -> float:
  """Bytes per KV-cache element."""
  return job_kv_bytes if precision.kv is None else DTYPE_BYTES[precision.kv]


def state_bytes(precision: Precision, kv_bytes_per_element: float) -> float:
  """Bytes per recurrent-state element: the ``state`` format, else the KV cache's."""
  return kv_bytes_per_element if precision.state is None else DTYPE_BYTES[precision.state]


def precision_available(hw: Hardware, compute: str) -> bool:
  """Whether ``hw`` computes GEMMs in ``compute`` at a peak of its own.

  The one reading of "format absent" in :class:`Hardware`'s figures: a
  narrower format is present where its peak exceeds the next wider format's
  (an absent FP8 is written as the BF16 peak, an absent FP4 as 0; both read as
  absent here). BF16 and FP16 are always present.

  Raises:
    ValueError: for a format not in ``COMPUTE_DTYPES``.
  """
  wider = {"bf16": None, "fp16": None, "fp8": hw.peak_flops_per_s,
           "fp4": hw.peak_fp8_flops_per_s}
  if compute not in wider:
    raise ValueError(f"Precision: compute={compute!r} is not one of {COMPUTE_DTYPES}")
  if wider[compute] is None:
    return True
  own = {"fp8": hw.peak_fp8_flops_per_s, "fp4": hw.peak_fp4_flops_per_s}[compute]
  return float(own) > float(wider[compute])


def peak_flops(hw: Hardware, compute: str) -> jax.Array:
  """Dense peak of the GEMM format on ``hw``.

  FP4 needs an accelerator with an FP4 figure (:func:`precision_available`);
  FP8 on an accelerator without it runs at the BF16 peak (its figure).

  Raises:
    ValueError: for FP4 on an accelerator without it.
  """
  if compute in ("bf16", "fp16"):
    return jnp.asarray(hw.peak_flops_per_s, float)
  if compute == "fp8":
    return jnp.asarray(hw.peak_fp8_flops_per_s, float)
  if compute == "fp4":
    if (pytree.is_concrete(hw.peak_fp4_flops_per_s) and pytree.is_concrete(hw.peak_fp8_flops_per_s)
        and not precision_available(hw, "fp4")):
      raise ValueError(f"Precision: compute='fp4' needs an FP4 peak above the FP8 peak; "
                       f"{hw.name} has peak_fp4_flops_per_s={hw.peak_fp4_flops_per_s!r}")
    return jnp.asarray(hw.peak_fp4_flops_per_s, float)
  raise ValueError(f"Precision: compute={compute!r} is not one of {COMPUTE_DTYPES}")


def plateau(eff, compute: str):
  """The format's best GEMM efficiency relative to the BF16 plateau."""
  return {"bf16": 1.0, "fp16": 1.0, "fp8": eff.fp8_matmul_efficiency,
          "fp4": eff.fp4_matmul_efficiency}[compute]


def cast_bytes(gemm_inputs_elements, compute: str) -> jax.Array | float:
  """HBM bytes of casting GEMM inputs from BF16 to ``compute`` with scales.

  Per element: read 2 bytes, write the narrow copy, plus the amax pass that
  sets the per-tensor scale (read 2 bytes again): ``4 + bytes(compute)``.
  Zero for BF16 compute.
  """
  if compute in ("bf16", "fp16"):
    return 0.0
  return gemm_inputs_elements * (4.0 + DTYPE_BYTES[compute])


def conversion_time_s(params_per_gpu, n_tensors, src_bytes: float, dst_bytes: float,
                      hw: Hardware, eff) -> jax.Array:
  """Time to convert one GPU's weights between formats during weight sync.

  ``params * (src + dst) / (HBM bandwidth)`` for the quantisation pass plus
  ``Efficiency.convert_per_tensor_s`` per tensor (block-scale computation and
  one launch per tensor). Zero when the formats match. The per-tensor default
  (1.2e-4 s) is the difference between NeMo-RL's FP8 and BF16 refit of
  Qwen3-30B-A3B on 16 H100 (2.9-4.0 s vs 0.74-1.0 s, ~18.9k tensors;
  NVIDIA-NeMo/RL docs/design-docs/nccl-reshard-refit.md @7ea279ab).
  """
  if src_bytes == dst_bytes:
    return jnp.zeros(())
  stream = params_per_gpu * (src_bytes + dst_bytes) / (
      hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency_max)
  return stream + n_tensors * eff.convert_per_tensor_s
