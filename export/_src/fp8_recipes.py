"""Megatron-Core's FP8 training recipes, read as the cost model's FP8 training.

Megatron-Core (``megatron/core/enums.py`` ``Fp8Recipe``, which NeMo-RL's
``megatron_cfg.fp8_cfg.fp8_recipe`` and slime's ``--fp8-recipe`` pass through)
names four scalings of FP8 GEMM inputs: ``delayed`` and ``tensorwise`` (one
scale per tensor), ``blockwise`` (1x128 activation and 128x128 weight blocks,
the DeepSeek-V3 recipe) and ``mxfp8`` (32-element blocks with power-of-two
scales). With ``fp8_param`` off all four keep BF16 weights and FP32 master
copies and cast the GEMM inputs, which is the cost model's FP8 training
(``Precision(compute="fp8")``: the FP8 peak and efficiency curve plus the casts
of :func:`costmodel._src.specs.precision`); the validation cases cost the
published Megatron blockwise and MXFP8 recipes the same way
(``costmodel/_src/fit/validation/moe_cases.py``, cases 30 and 33-35). What the
model leaves out, the block scales' own quantization kernels, is said on the
import's "not modelled" line. FP8 parameters (``fp8_param`` / ``--fp8-param-gather``)
change the weights' bytes and are refused.
"""

from __future__ import annotations

import costmodel as cm

RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
# e4m3 everywhere, or hybrid (e4m3 forward, e5m2 gradients): one byte per element either way
FORMATS = ("e4m3", "hybrid")


def training(fw: str, where: str, fmt: object, recipe: object, fp8_param: bool,
             notes: list[str]) -> cm.Precision:
  """The training precision of an FP8 recipe; a recipe other than ``delayed`` is noted.

  Args:
    fw: The framework's name, for messages.
    where: The settings' names as the framework spells them (for messages and notes).
    fmt: The FP8 format (``e4m3`` or ``hybrid``).
    recipe: The scaling recipe, one of :data:`RECIPES`.
    fp8_param: Whether the parameters themselves are kept in FP8.
    notes: The import's "not modelled" lines, appended to.

  Raises:
    ValueError: for another format or recipe, or FP8 parameters.
  """
  if fmt not in FORMATS:
    raise ValueError(f"{fw}: {where} format {fmt!r} is not one of {FORMATS}")
  if recipe not in RECIPES:
    raise ValueError(f"{fw}: {where} recipe {recipe!r} is not one of {RECIPES}")
  if fp8_param:
    raise ValueError(f"{fw}: {where} keeps the parameters in FP8 (fp8_param): the cost model's "
                     "FP8 training keeps BF16 weights and casts the GEMM inputs")
  if recipe != "delayed":
    notes.append(f"{where} recipe {recipe!r}: costed as per-tensor-scaled FP8 GEMMs with "
                 "BF16 weights (its finer scales' quantization kernels not modelled)")
  return cm.Precision(compute="fp8")
