"""Operand stream of narrow, memory-bound GEMMs (``Efficiency.matmul_stream_half_bytes``).

A GEMM of output width N in a format of ``b`` bytes holds ``N b`` bytes of
weight columns per K element in flight; a narrow, memory-bound GEMM streams
below the HBM plateau, and FP8 (b = 1) more so than BF16 at the same N.
Hand-derived numbers, finite and finite-difference gradients, and the
relaxed roofline tending to the exact one as tau -> 0.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.fit.validation.cases import gemm_rate
from costmodel._src.ops import efficiency as eff_lib
from costmodel._src.ops import roofline

EFF = cm.Efficiency()
H800 = cm.hardware.get("H800")


def _operand_bytes(m, n, k, in_bytes):
  return in_bytes * (m * k + k * n) + 2.0 * m * n  # BF16 output


def test_narrow_fp8_gemm_streams_below_a_wide_one_by_hand():
  # DeepGEMM's narrowest dense shape: M 64, N 2,112, K 7,168 in FP8 on H800.
  m, n, k = 64.0, 2112.0, 7168.0
  nbytes = _operand_bytes(m, n, k, 1.0)
  assert nbytes == 15_867_904.0
  ideal = nbytes / 3.35e12
  e_mem = 0.88 / (1.0 + (0.5e-6 / ideal) ** 0.8)  # the preset's plateau and time curve
  width = 1.0 / (1.0 + (1700.0 / 2112.0) ** 2)  # 0.607: the stream factor at N b = 2,112 B
  assert width == pytest.approx(0.6068, abs=1e-4)
  expected_tflops = 2.0 * m * n * k / (ideal / (e_mem * width)) / 1e12
  assert expected_tflops == pytest.approx(187.4, abs=0.5)  # published 206 (DeepGEMM README)
  assert float(gemm_rate(H800, m, n, k, EFF, "fp8")) == pytest.approx(expected_tflops, rel=1e-5)
  # The same bytes in a wide GEMM: the factor only.
  t_narrow = roofline.memory_time(nbytes, H800, EFF, width_bytes=n)
  t_wide = roofline.memory_time(nbytes, H800, EFF)
  assert float(t_narrow / t_wide) == pytest.approx(1.0 + (1700.0 / 2112.0) ** 2, rel=1e-6)
  # Per byte streamed, N = 2,112 runs below N = 24,576 (factor 0.995).
  rate = lambda n_: nbytes / float(roofline.memory_time(nbytes, H800, EFF, width_bytes=n_))
  assert rate(2112.0) / rate(24576.0) == pytest.approx(
      (1.0 + (1700.0 / 24576.0) ** 2) / (1.0 + (1700.0 / 2112.0) ** 2), rel=1e-6)


def test_fp8_holds_half_the_bytes_in_flight_of_bf16_at_the_same_width():
  n = 2112.0
  t = lambda dtype: roofline.roofline(2.0 * 64 * n * 7168, 1e7, 64.0, H800, EFF, n=n,
                                      k=7168.0, dtype=dtype)
  wide = float(roofline.memory_time(1e7, H800, EFF))
  # Memory bound in both formats: BF16 streams at N b = 4,224 B, FP8 at 2,112 B.
  assert float(t("bf16").time_s) == pytest.approx(wide * (1.0 + (1700.0 / 4224.0) ** 2), rel=1e-6)
  assert float(t("fp8").time_s) == pytest.approx(wide * (1.0 + (1700.0 / 2112.0) ** 2), rel=1e-6)


def test_compute_bound_gemms_are_untouched():
  # M = 4,096: compute bound; the stream factor does not reach the time.
  m, n, k = 4096.0, 2112.0, 7168.0
  r = roofline.roofline(2.0 * m * n * k, _operand_bytes(m, n, k, 1.0), m, H800, EFF, n=n, k=k,
                        dtype="fp8")
  t_c = roofline.compute_time(2.0 * m * n * k, m, H800, EFF, n=n, k=k, dtype="fp8")
  assert float(r.time_s) == float(t_c)


def test_the_parameter_is_checked():
  with pytest.raises(ValueError, match="matmul_stream_half_bytes"):
    cm.Efficiency(matmul_stream_half_bytes=0.0)


def _rate(x, tau, m=64.0):
  """TFLOP/s of a narrow FP8 GEMM of M rows as a function of (W_half, N)."""
  eff = dataclasses.replace(EFF, matmul_stream_half_bytes=x[0])
  k = 7168.0
  flops = 2.0 * m * x[1] * k
  t = roofline.roofline(flops, _operand_bytes(m, x[1], k, 1.0), m, H800, eff, n=x[1], k=k,
                        tau=tau, dtype="fp8").time_s
  return flops / t / 1e12


@pytest.mark.parametrize("tau", [0.0, 0.05])
def test_gradients_are_finite_and_match_finite_differences(x64, tau):
  x = jnp.asarray([1700.0, 2112.0])
  g = np.asarray(jax.grad(lambda x_: _rate(x_, tau))(x))
  assert np.all(np.isfinite(g))
  assert g[0] < 0 and g[1] > 0  # a larger half width slows it, a wider N speeds it
  for i, h in enumerate((1.0, 1.0)):
    dx = jnp.zeros(2).at[i].set(h)
    fd = (float(_rate(x + dx, tau)) - float(_rate(x - dx, tau))) / (2.0 * h)
    assert g[i] == pytest.approx(fd, rel=1e-5)


def test_gradient_is_finite_for_an_empty_transfer():
  g = jax.grad(lambda w: roofline.memory_time(0.0, H800, EFF, width_bytes=w))(2112.0)
  assert np.isfinite(float(g)) and float(g) == 0.0


def test_relaxed_value_tends_to_the_exact_one(x64):
  # M = 384: compute (12.1 us) and the narrow stream (12.4 us) nearly tie,
  # where the relaxed maximum departs most from the exact one.
  x = jnp.asarray([1700.0, 2112.0])
  exact = float(_rate(x, 0.0, m=384.0))
  taus = (0.1, 0.01, 0.001)
  gaps = [1.0 - float(_rate(x, tau, m=384.0)) / exact for tau in taus]
  assert gaps[0] > gaps[1] > gaps[2] >= 0.0  # the relaxed time is never below the exact one
  assert all(g <= 2.0**tau - 1.0 for g, tau in zip(gaps, taus, strict=True))
  assert gaps[2] < 1e-6


def test_stream_efficiency_is_the_saturating_curve_in_bytes():
  e = float(eff_lib.stream_efficiency(1700.0, 0.8, EFF))
  assert e == pytest.approx(0.4, rel=1e-6)  # half of the plateau at N b = W_half
