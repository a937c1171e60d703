"""SGLang's own ``mem_fraction_static`` where a slime run does not set it.

slime passes ``--sglang-mem-fraction-static`` to SGLang's ``ServerArgs`` (default
None: ``slime/backends/sglang_utils/sglang_engine.py`` @624b824); slime @624b824
pins SGLang v0.5.15.post1 (``docker/Dockerfile``, ``build_conda.sh``), whose
``ServerArgs._handle_gpu_memory_settings`` (``python/sglang/srt/server_args.py``)
then sets the fraction from the GPU's memory ``M`` (MiB) and the engine's degrees:

* chunked prefill ``C`` (unless set): 2,048 below 35 GiB, 4,096 below 60 GiB,
  8,192 below 160 GiB, else 16,384; the decode CUDA graphs' largest batch ``B``
  (unless set): 8 below 20 GiB; below 35 GiB 24 (TP < 4) or 80; below 60 GiB 32 or
  160; below 160 GiB 256 or 512; else 512;
* reserved ``R`` = 512 + 1.5 max(C, 2048) + 2 B (decode graphs on) + TP x PP / 8 x 1024
  + with data-parallel attention 3 B x DP (and 1.5 B x DP more where B > 300)
  + the prefill graphs (on unless disabled or SGLang's memory saver is on, which slime
  turns on with ``--offload-rollout``, implied by ``--colocate``): 8 per captured
  size (sizes 4..C on SGLang's capture grid) or 1,536 with MLA attention;
* ``R`` at least 10,240 where ``M`` > 60 GiB; fraction = round((M - R) / M, 3).

``M`` is the accelerator preset's memory (``Hardware.hbm_bytes``); SGLang reads
``nvidia-smi``'s total, a few hundred MiB less on an 80 GB card (a fraction lower
by under 0.001 there). DeepEP's extra 2,048, the disaggregated prefill and decode
servers and the vision models' adjustment are not slime's defaults and not read.
"""

from __future__ import annotations

_GIB = 1024  # MiB


def _capture_sizes(max_bs: int) -> int:
  """How many prefill CUDA graph sizes SGLang captures up to ``max_bs``
  (``_generate_prefill_cuda_graph_batch_sizes``)."""
  grid = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
          + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
          + list(range(4608, max_bs + 1, 512)))
  return sum(1 for s in grid if s <= max_bs)


def defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
  """``(chunked_prefill_size, decode graph max_bs)`` SGLang picks for this GPU and TP."""
  small = tp < 4
  if gpu_mib < 20 * _GIB:
    return 2048, 8
  if gpu_mib < 35 * _GIB:
    return 2048, 24 if small else 80
  if gpu_mib < 60 * _GIB:
    return 4096, 32 if small else 160
  if gpu_mib < 160 * _GIB:
    return 8192, 256 if small else 512
  return 16384, 512


def static_fraction(gpu_mib: float, tp: int, pp: int = 1, dp: int = 1,
                    dp_attention: bool = False, mla: bool = False,
                    chunked_prefill: int | None = None, max_bs: int | None = None,
                    decode_graphs: bool = True, prefill_graphs: bool = True) -> float:
  """SGLang's ``mem_fraction_static`` for a GPU of ``gpu_mib`` MiB (see the module).

  Raises:
    ValueError: for a GPU memory, degree or size that is not positive.
  """
  for name, v in (("gpu_mib", gpu_mib), ("tp", tp), ("pp", pp), ("dp", dp)):
    if not v > 0:
      raise ValueError(f"SGLang mem_fraction_static: {name}={v!r} must be positive")
  chunk, bs = defaults(gpu_mib, tp)
  chunk = chunk if chunked_prefill is None else int(chunked_prefill)
  bs = bs if max_bs is None else int(max_bs)
  # chunked prefill off (-1): the activations of SGLang's max_prefill_tokens default
  reserved = 512 + max(chunk if chunk > 0 else 16384, 2048) * 1.5 + tp * pp / 8 * 1024
  if decode_graphs:
    reserved += bs * 2
  if dp_attention:
    reserved += bs * dp * 3 + (bs * dp * 1.5 if bs > 300 else 0)
  if prefill_graphs:
    reserved += 1.5 * 1024 if mla else _capture_sizes(chunk) * 8
  if gpu_mib > 60 * _GIB:
    reserved = max(reserved, 10 * _GIB)
  fraction = round((gpu_mib - reserved) / gpu_mib, 3)
  if not fraction > 0:
    raise ValueError(f"SGLang mem_fraction_static: {reserved:.0f} MiB reserved leaves nothing "
                     f"of gpu_mib={gpu_mib}")
  return fraction
