"""Fit an accelerator preset to GPU microbenchmarks.

Reads the JSON written by ``benchmarks/gpu_calibration.py`` (matmul, HBM and
decode-step timings on one GPU) and fits, with optax, the accelerator's large-
operation efficiencies (``matmul_efficiency_max``, ``hbm_efficiency_max``) and
the efficiency curves' half-sizes (``matmul_half_rows``,
``memory_half_time_s``) so that the roofline of :mod:`costmodel._src.ops.roofline`
reproduces the measured times. Loss: mean squared log error; parameters kept
physical (efficiencies in (0, 1) through a logistic, sizes positive through a
log).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from costmodel._src.ops import roofline
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs.hardware import Hardware


class MicrobenchFit(NamedTuple):
  """Result of :func:`fit_microbenchmarks`."""

  hardware: Hardware
  efficiency: Efficiency
  device: str
  date: str
  error_before: dict  # kind -> median abs relative error
  error_after: dict
  n_points: dict


def _load(source) -> dict:
  if isinstance(source, dict):
    return source
  try:
    with open(os.fspath(source), encoding="utf-8") as f:
      return json.load(f)
  except OSError as e:
    raise ValueError(f"microbenchmark file {source!r} cannot be read: {e}") from e
  except json.JSONDecodeError as e:
    raise ValueError(f"microbenchmark file {source!r} is not valid JSON: {e}") from e


def _arrays(data: dict):
  for key in ("matmul", "hbm"):
    if key not in data or not isinstance(data[key], list) or not data[key]:
      raise ValueError(f"microbenchmarks: field {key!r} must be a non-empty list of records")
  try:
    mm = np.array([[r["m"], r["n"], r["k"], r["seconds"]] for r in data["matmul"]], float)
    hb = np.array([[r["bytes_moved"], r["seconds"]] for r in data["hbm"]], float)
  except KeyError as e:
    raise ValueError(f"microbenchmarks: a record lacks field {e.args[0]!r}") from e
  if np.any(mm <= 0) or np.any(hb <= 0):
    raise ValueError("microbenchmarks: sizes and seconds must be > 0")
  return mm, hb


def _predict(hw: Hardware, eff: Efficiency, mm, hb):
  m, n, k = mm[:, 0], mm[:, 1], mm[:, 2]
  flops = 2.0 * m * n * k
  nbytes = 2.0 * (m * k + k * n + m * n)
  t_mm = roofline.roofline(flops, nbytes, m, hw, eff).time_s
  t_hb = roofline.memory_time(hb[:, 0], hw, eff)
  return t_mm, t_hb


def _logit(x):
  return jnp.log(x) - jnp.log1p(-x)


def fit_microbenchmarks(source, hardware: Hardware, efficiency: Efficiency | None = None,
                        steps: int = 400, learning_rate: float = 0.05) -> MicrobenchFit:
  """Fits ``hardware``'s efficiencies to the measured matmul and HBM times.

  Args:
    source: Path of the JSON (or the loaded dict).
    hardware: The preset to refine (peak rates are kept).
    efficiency: Starting efficiency parameters.
    steps: Adam steps.
    learning_rate: Adam learning rate.

  Raises:
    ValueError: for an unreadable or malformed file, naming the field.
  """
  data = _load(source)
  mm, hb = _arrays(data)
  eff0 = efficiency if efficiency is not None else Efficiency()
  mm_t, hb_t = jnp.log(mm[:, 3]), jnp.log(hb[:, 1])
  z0 = {"mm_max": _logit(jnp.clip(hardware.matmul_efficiency_max, 1e-3, 0.999)),
        "hbm_max": _logit(jnp.clip(hardware.hbm_efficiency_max, 1e-3, 0.999)),
        "rows": jnp.log(jnp.asarray(eff0.matmul_half_rows, float)),
        "mem_t": jnp.log(jnp.asarray(eff0.memory_half_time_s, float))}

  def build(z):
    hw = dataclasses.replace(hardware, matmul_efficiency_max=jax.nn.sigmoid(z["mm_max"]),
                             hbm_efficiency_max=jax.nn.sigmoid(z["hbm_max"]))
    eff = dataclasses.replace(eff0, matmul_half_rows=jnp.exp(z["rows"]),
                              memory_half_time_s=jnp.exp(z["mem_t"]))
    return hw, eff

  def loss_fn(z):
    hw, eff = build(z)
    t_mm, t_hb = _predict(hw, eff, mm, hb)
    return (jnp.mean((jnp.log(t_mm) - mm_t) ** 2) + jnp.mean((jnp.log(t_hb) - hb_t) ** 2))

  opt = optax.adam(learning_rate)

  @jax.jit
  def step(z, state):
    g = jax.grad(loss_fn)(z)
    u, state = opt.update(g, state, z)
    return optax.apply_updates(z, u), state

  z, state = dict(z0), opt.init(z0)
  for _ in range(steps):
    z, state = step(z, state)
  hw, eff = build(z)
  hw = dataclasses.replace(hw, matmul_efficiency_max=float(hw.matmul_efficiency_max),
                           hbm_efficiency_max=float(hw.hbm_efficiency_max))
  eff = dataclasses.replace(eff, matmul_half_rows=float(eff.matmul_half_rows),
                            memory_half_time_s=float(eff.memory_half_time_s))

  def errors(h, e):
    t_mm, t_hb = _predict(h, e, mm, hb)
    return {"matmul": float(np.median(np.abs(np.asarray(t_mm) / mm[:, 3] - 1))),
            "hbm": float(np.median(np.abs(np.asarray(t_hb) / hb[:, 1] - 1)))}

  dev = data.get("device", {})
  return MicrobenchFit(hw, eff, str(dev.get("device_kind", "unknown")),
                       str(data.get("date", "")), errors(hardware, eff0), errors(hw, eff),
                       {"matmul": int(mm.shape[0]), "hbm": int(hb.shape[0])})
