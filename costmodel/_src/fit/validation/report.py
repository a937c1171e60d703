"""Predicted versus published: rows, per-group summaries, markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from costmodel._src.fit.validation.cases import Case
from costmodel._src.ops.efficiency import Efficiency


def relative_error(predicted: float, published: float) -> float:
  """``predicted / published - 1``: the signed error of a prediction."""
  return predicted / published - 1.0


class Row(NamedTuple):
  row_id: str
  group: str
  label: str
  unit: str
  published: float
  predicted: float
  note: str

  @property
  def error(self) -> float:
    return relative_error(self.predicted, self.published)


def evaluate(cases: Sequence[Case], efficiency: Efficiency | None = None) -> list[Row]:
  """Predicts every case (concrete floats)."""
  eff = efficiency if efficiency is not None else Efficiency()
  return [Row(c.row_id, c.group, c.label, c.unit, float(c.published), float(c.predict(eff)),
              c.note) for c in cases]


def summary(rows: Sequence[Row]) -> dict[str, dict]:
  """Per group: count, median and worst absolute error, share within 10%/20%."""
  out = {}
  for group in dict.fromkeys(r.group for r in rows):
    e = np.abs([r.error for r in rows if r.group == group])
    out[group] = {"n": int(e.size), "median": float(np.median(e)), "worst": float(e.max()),
                  "within_10": float(np.mean(e <= 0.10)), "within_20": float(np.mean(e <= 0.20))}
  return out


def markdown(rows: Sequence[Row]) -> str:
  """A markdown table of every row and a per-group summary."""
  lines = ["| row | group | case | published | predicted | error |",
           "|---|---|---|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r.row_id} | {r.group} | {r.label} | {r.published:,.4g} {r.unit} | "
                 f"{r.predicted:,.4g} | {r.error:+.1%} |")
  lines += ["", "| group | rows | median abs error | worst | within 10% | within 20% |",
            "|---|---:|---:|---:|---:|---:|"]
  for g, s in summary(rows).items():
    lines.append(f"| {g} | {s['n']} | {s['median']:.1%} | {s['worst']:.1%} | "
                 f"{s['within_10']:.0%} | {s['within_20']:.0%} |")
  return "\n".join(lines)
