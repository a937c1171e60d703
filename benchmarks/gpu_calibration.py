"""Measures matmul throughput, HBM bandwidth and decode step time on one device.

The numbers calibrate the roofline cost model: achieved matmul FLOP/s as a
function of shape, achieved memory bandwidth as a function of transfer size,
and the wall time of one decode step of a small decoder-only transformer whose
dimensions are recorded so the cost model can predict the same step.

Every timing jits the kernel, runs it once to compile and warm up, then takes
the median over `repeats` repeats. A repeat issues the kernel back to back
enough times to last at least `min_repeat_s` and blocks on the last result, so
the reported time per call includes dispatch overhead only where it is larger
than the kernel itself (small matmuls, small copies, small decode batches).

The full sizes are bf16 matmuls with m = 1, 2, 4, ..., 8192 against (k, n)
weights 4096x4096, 4096x14336, 14336x4096 and 8192x28672; bandwidth kernels
over 1 MiB ... 4 GiB arrays in powers of two; and decode steps of a model with
TinyLlama-1.1B dimensions (22 layers, d_model 2048, 32 query and 4 KV heads,
gated MLP 5632, vocab 32000) over a 2048-token KV cache at batch 1 ... 512
(about 24 GB of cache at batch 512). They are bounded so the run, compilation
and autotuning included, stays within about four minutes on an H200.

Usage, from the repository root::

  # On a GPU (989e12 is the H200's dense bf16 peak):
  python -m benchmarks.gpu_calibration --out=/tmp/h200.json \
      --peak_flops_per_s=989e12

  # Tiny sizes, a few seconds on a CPU:
  python -m benchmarks.gpu_calibration --quick --out=/tmp/cpu.json

Flags: `--out` (JSON path, required), `--quick` (tiny sizes), `--repeats`
(timed repeats per measurement, default 5, 3 with `--quick`),
`--peak_flops_per_s` (optional; adds `fraction_of_peak` to matmul records),
`--max_hbm_bytes` (largest array of the bandwidth sweep, default 4 GiB, 1 MiB
with `--quick`), `--decode_batches` (comma-separated batch sizes, default
1,2,4,...,512, or 1,2,4 with `--quick`), `--decode_context_len` (KV cache
length, default 2048, 32 with `--quick`).

JSON schema (all sizes in bytes, all times in seconds)::

  {
    "schema_version": 2,
    "date": "2025-01-31T12:00:00+00:00",          # ISO 8601, UTC
    "jax_version": "0.4.35",
    "device": {"platform": "gpu", "device_kind": "NVIDIA H200",
               "device_count": 1},
    "config": {"quick": false, "repeats": 5, "min_repeat_s": 0.02,
               "peak_flops_per_s": 9.89e14 | null,
               "max_hbm_bytes": 4294967296, "decode_batches": [1, ...],
               "decode_context_len": 2048},
    "matmul": [                                   # C[m, n] = A[m, k] B[k, n]
      {"m": 1, "n": 4096, "k": 4096, "dtype": "bfloat16",
       "out_dtype": "bfloat16", "flops": 2*m*n*k, "seconds": ...,
       "flops_per_s": ..., "fraction_of_peak": ... | null}, ...],
    "hbm": [                                      # kernel "scale" or "sum"
      {"kernel": "scale", "n_elements": ..., "dtype": "bfloat16",
       "bytes_read": ..., "bytes_written": ..., "bytes_moved": ...,
       "seconds": ..., "bytes_per_s": ...}, ...],
    "decode_model": {"vocab_size": ..., "d_model": ..., "n_layers": ...,
                     "n_heads": ..., "n_kv_heads": ..., "head_dim": ...,
                     "d_ff": ..., "context_len": ..., "dtype": "bfloat16",
                     "n_params": ..., "param_bytes": ...,
                     "kv_bytes_per_token": ..., "flops_per_token": ...},
    "decode": [
      {"batch": 1, "context_len": ..., "seconds": ..., "tokens_per_s": ...,
       "flops": ..., "weight_bytes_read": ..., "kv_bytes_read": ...,
       "kv_bytes_written": ..., "bytes_min": ..., "flops_per_s": ...,
       "bytes_per_s": ...}, ...],
    "decode_loop": [                              # shrinking batch, engine-like
      {"batch": 512, "steps": 32, "kernel_seconds_per_step": ...,
       "loop_seconds_per_step": ..., "host_overhead_s": ...}, ...],
    "step_overhead_fit": {"decode_step_overhead_s": ...,
                          "decode_seq_overhead_s": ...},
    "elapsed_s": ...                              # wall time of the run
  }

`decode_loop` runs the decode step with the batch shrinking (largest first),
once back to back on the device and once as an engine does, with the sampled
tokens copied to the host every step; the difference per step is the host
overhead, fitted as fixed + per-sequence (`step_overhead_fit`, the cost
model's `Efficiency.decode_step_overhead_s` and `decode_seq_overhead_s`).

`scale` computes `y = x * 2` (reads and writes the array); `sum` reduces the
array to a scalar (reads it once). A decode step feeds one new token per
sequence, writes its keys and values at the last cache slot and attends over
all `context_len` slots; `bytes_min` is the unavoidable traffic (weights,
KV cache read and write), activations excluded.

The kernels live in :mod:`benchmarks.calibration_kernels`, the decoder in
:mod:`benchmarks.calibration_decoder`; this module sizes the run, writes the
JSON and holds the command line.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import datetime
import json
import time
from typing import Any

from absl import app
from absl import flags
import jax

from benchmarks.calibration_decoder import FULL_DECODER
from benchmarks.calibration_decoder import QUICK_DECODER
from benchmarks.calibration_decoder import DecoderConfig
from benchmarks.calibration_decoder import decode_step
from benchmarks.calibration_decoder import decoder_summary
from benchmarks.calibration_decoder import fit_step_overhead
from benchmarks.calibration_decoder import init_decoder
from benchmarks.calibration_decoder import init_kv_cache
from benchmarks.calibration_decoder import measure_decode
from benchmarks.calibration_decoder import measure_decode_loop
from benchmarks.calibration_kernels import check_positive_int
from benchmarks.calibration_kernels import check_timing
from benchmarks.calibration_kernels import measure_hbm
from benchmarks.calibration_kernels import measure_matmul

__all__ = ("FULL_DECODER", "QUICK_DECODER", "DecoderConfig", "decode_step", "decoder_summary",
           "fit_step_overhead", "hbm_sizes_bytes", "init_decoder", "init_kv_cache", "main",
           "measure_decode", "measure_decode_loop", "measure_hbm", "measure_matmul", "run_all")

_SCHEMA_VERSION = 2

# (k, n) of transformer projections: attention 4096x4096, Llama-3-8B MLP
# up/down, Llama-3-70B MLP up.
_FULL_MATMUL_KN = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672))
_FULL_MATMUL_M = tuple(2**i for i in range(14))  # 1 ... 8192
_QUICK_MATMUL_KN = ((128, 128), (128, 256))
_QUICK_MATMUL_M = (1, 16, 128)

_FULL_HBM_MIN_BYTES = 2**20
_FULL_HBM_MAX_BYTES = 2**32
_QUICK_HBM_MIN_BYTES = 2**16
_QUICK_HBM_MAX_BYTES = 2**20

_FULL_DECODE_BATCHES = tuple(2**i for i in range(10))  # 1 ... 512
_QUICK_DECODE_BATCHES = (1, 2, 4)

def hbm_sizes_bytes(min_bytes: int, max_bytes: int) -> list[int]:
  """Powers-of-two ladder `min_bytes * 2**i` up to `max_bytes` inclusive."""
  check_positive_int("max_hbm_bytes", max_bytes)
  if max_bytes < min_bytes:
    raise ValueError(f"max_hbm_bytes={max_bytes} must be >= {min_bytes}")
  sizes = [min_bytes]
  while sizes[-1] * 2 <= max_bytes:
    sizes.append(sizes[-1] * 2)
  return sizes


def run_all(*, quick: bool = False, repeats: int | None = None,
            peak_flops_per_s: float | None = None,
            max_hbm_bytes: int | None = None,
            decode_batches: Sequence[int] | None = None,
            decode_context_len: int | None = None,
            min_repeat_s: float | None = None) -> dict[str, Any]:
  """Runs the three measurements and returns the JSON-ready report.

  Args:
    quick: Tiny sizes, for CPUs and tests.
    repeats: Timed repeats per measurement (default 5, or 3 when quick).
    peak_flops_per_s: Optional matmul peak for `fraction_of_peak`.
    max_hbm_bytes: Largest bandwidth-sweep array (default 4 GiB, 1 MiB quick).
    decode_batches: Decode batch sizes (default 1..512, or 1, 2, 4 quick).
    decode_context_len: KV cache length (default 2048, or 32 quick).
    min_repeat_s: Minimum duration of one repeat (default 0.02, 0.002 quick).

  Returns:
    A dict with the schema given in the module docstring.

  Raises:
    ValueError: If an argument is invalid; the message names it.
  """
  repeats = (3 if quick else 5) if repeats is None else repeats
  min_repeat_s = (0.002 if quick else 0.02) if min_repeat_s is None else (
      min_repeat_s)
  check_timing(repeats, min_repeat_s)
  if peak_flops_per_s is not None and not peak_flops_per_s > 0:
    raise ValueError(f"peak_flops_per_s={peak_flops_per_s!r} must be > 0")
  if max_hbm_bytes is None:
    max_hbm_bytes = _QUICK_HBM_MAX_BYTES if quick else _FULL_HBM_MAX_BYTES
  sizes = hbm_sizes_bytes(
      _QUICK_HBM_MIN_BYTES if quick else _FULL_HBM_MIN_BYTES, max_hbm_bytes)
  if decode_batches is None:
    decode_batches = _QUICK_DECODE_BATCHES if quick else _FULL_DECODE_BATCHES
  decode_batches = list(decode_batches)
  if not decode_batches:
    raise ValueError(f"decode_batches={decode_batches!r} must not be empty")
  for batch in decode_batches:
    check_positive_int("decode_batches", batch)
  decoder = QUICK_DECODER if quick else FULL_DECODER
  if decode_context_len is not None:
    check_positive_int("decode_context_len", decode_context_len)
    decoder = dataclasses.replace(decoder, context_len=decode_context_len)
  ms, kns = ((_QUICK_MATMUL_M, _QUICK_MATMUL_KN) if quick else
             (_FULL_MATMUL_M, _FULL_MATMUL_KN))
  shapes = [(m, n, k) for k, n in kns for m in ms]
  timing = {"repeats": repeats, "min_repeat_s": min_repeat_s}
  device = jax.devices()[0]
  start = time.perf_counter()
  report = {
      "schema_version": _SCHEMA_VERSION,
      "date": datetime.datetime.now(datetime.UTC).isoformat(
          timespec="seconds"),
      "jax_version": jax.__version__,
      "device": {"platform": device.platform,
                 "device_kind": device.device_kind,
                 "device_count": jax.device_count()},
      "config": {"quick": quick, **timing,
                 "peak_flops_per_s": peak_flops_per_s,
                 "max_hbm_bytes": max_hbm_bytes,
                 "decode_batches": decode_batches,
                 "decode_context_len": decoder.context_len},
      "matmul": measure_matmul(shapes, peak_flops_per_s=peak_flops_per_s,
                               **timing),
      "hbm": measure_hbm(sizes, **timing),
      "decode_model": decoder_summary(decoder),
      "decode": measure_decode(decoder, decode_batches, **timing),
  }
  loop = measure_decode_loop(decoder, decode_batches,
                             steps_per_batch=4 if quick else 32)
  report["decode_loop"] = loop
  report["step_overhead_fit"] = fit_step_overhead(loop)
  report["elapsed_s"] = time.perf_counter() - start
  return report


def _flag_values() -> flags.FlagValues:
  """A private flag set, so importing this module defines no global flags."""
  fv = flags.FlagValues()
  flags.DEFINE_string("out", None, "Path of the JSON report.", flag_values=fv)
  flags.DEFINE_bool("quick", False, "Tiny sizes, for CPUs and tests.",
                    flag_values=fv)
  flags.DEFINE_integer("repeats", None, "Timed repeats (default 5; 3 quick).",
                       flag_values=fv)
  flags.DEFINE_float("peak_flops_per_s", None,
                     "Matmul peak for fraction_of_peak, e.g. 989e12.",
                     flag_values=fv)
  flags.DEFINE_integer("max_hbm_bytes", None,
                       "Largest bandwidth-sweep array (default 4 GiB; 1 MiB "
                       "quick).", flag_values=fv)
  flags.DEFINE_list("decode_batches", None,
                    "Decode batch sizes (default 1,2,...,512; 1,2,4 quick).",
                    flag_values=fv)
  flags.DEFINE_integer("decode_context_len", None,
                       "KV cache length (default 2048; 32 quick).",
                       flag_values=fv)
  return fv


def main(argv: Sequence[str]) -> None:
  """Parses flags from `argv` (program name first) and writes the report.

  Raises:
    ValueError: If a flag value is invalid; the message names the flag.
  """
  fv = _flag_values()
  if any(arg in ("--help", "-h", "--helpfull") for arg in argv[1:]):
    print(fv.get_help())
    return
  fv(list(argv))
  if not fv.out:
    raise ValueError(f"out={fv.out!r} must be a path")
  batches = None
  if fv.decode_batches is not None:
    try:
      batches = [int(b) for b in fv.decode_batches]
    except ValueError:
      raise ValueError(
          f"decode_batches={fv.decode_batches!r} must be ints") from None
  report = run_all(quick=fv.quick, repeats=fv.repeats,
                   peak_flops_per_s=fv.peak_flops_per_s,
                   max_hbm_bytes=fv.max_hbm_bytes, decode_batches=batches,
                   decode_context_len=fv.decode_context_len)
  with open(fv.out, "w") as f:
    json.dump(report, f, indent=1)
    f.write("\n")


def _parse_program_name(argv: list[str]) -> list[str]:
  flags.FLAGS(argv[:1])  # absl's own flags; ours are parsed in `main`.
  return argv


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_program_name)
