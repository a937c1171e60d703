"""The large-space benchmark's comparison (benchmarks/search_large.py) from its
data: the counts and gaps derived by hand from the pairs, and the report's
tables carrying those numbers."""

import pytest

from benchmarks import search_large

_COLD = {"name": "ppo-70b-1024", "seed": 0, "budget_s": 14.3, "gradient": 262.72,
         "random": 292.72, "annealing": 293.60, "cut_dp": 262.72}


def _warm(*rows):
  return {"name": "dsv3", "families": ["colocated", "split"], "sizes": {"colocated": 2.0e8,
          "split": 3.0e12}, "load": 1.2, "rows": list(rows)}


def _rows(text, first):
  """The cells of every table row of ``text`` whose first cell is ``first``."""
  out = []
  for line in text.splitlines():
    if line.startswith("|"):
      cells = [c.strip() for c in line.strip("|").split("|")]
      if cells[0] == first:
        out.append(cells[1:])
  return out


def _number(cell):
  """``"+11.42%"`` -> 0.1142, ``"3/4"`` -> (3, 4), ``"2.5"`` -> 2.5."""
  if cell.endswith("%"):
    return float(cell[:-1]) / 100
  if "/" in cell:
    a, b = cell.split("/")
    return int(a), int(b)
  return float(cell)


def test_cold_pairs_alone_are_compared():
  c = search_large.comparison([_COLD])
  # Strictly better than random search and annealing; a tie with the cut DP.
  assert c["gradient"]["wins"] == 1 and c["cut_dp"]["wins"] == 1
  assert c["random"]["wins"] == c["annealing"]["wins"] == 0
  assert (c["random"]["strict"], c["random"]["at_least"]) == (1, 1)
  assert (c["cut_dp"]["strict"], c["cut_dp"]["at_least"]) == (0, 1)
  assert c["random"]["median_gap"] == pytest.approx(292.72 / 262.72 - 1)
  assert c["annealing"]["least_gap"] == pytest.approx(293.60 / 262.72 - 1)
  assert c["cut_dp"]["median_gap"] == 0.0

  text = search_large.report({"warm": [], "cold": [_COLD]}, "2026-12-05")
  # One comparison table (cold only), whose cells carry those numbers.
  (random,) = _rows(text, "random")
  assert _number(random[0]) == (0, 1)
  assert [_number(x) for x in random[1].split(" / ")] == [1.0, 1.0]
  assert _number(random[2]) == pytest.approx(0.1142, abs=5e-5)
  (cut,) = _rows(text, "cut_dp")
  assert _number(cut[0]) == (1, 1) and _number(cut[2]) == 0.0
  (pair,) = _rows(text, "ppo-70b-1024")
  assert pair[1] == "cold"
  assert [_number(x) for x in pair[2:]] == [14.3, 262.72, 292.72, 293.60, 262.72]


def test_warm_pairs_count_wins_ties_and_gaps():
  rows = [dict(seed=0, budget_s=2.0, gradient=100.0, random=110.0, annealing=90.0,
               cut_dp=100.0),
          dict(seed=1, budget_s=3.0, gradient=100.0, random=101.0, annealing=102.0,
               cut_dp=104.0)]
  c = search_large.comparison(rows)
  # Seed 0: annealing best (90); seed 1: the gradient search best, alone.
  assert c["gradient"]["wins"] == 1 and c["annealing"]["wins"] == 1
  assert c["random"]["wins"] == 0 and c["cut_dp"]["wins"] == 0
  assert (c["annealing"]["strict"], c["annealing"]["at_least"]) == (1, 1)
  assert (c["cut_dp"]["strict"], c["cut_dp"]["at_least"]) == (1, 2)
  assert c["annealing"]["median_gap"] == pytest.approx((-0.10 + 0.02) / 2)
  assert c["annealing"]["least_gap"] == pytest.approx(-0.10)
  assert c["cut_dp"]["median_gap"] == pytest.approx(0.02)
  assert c["cut_dp"]["least_gap"] == 0.0

  text = search_large.report({"warm": [_warm(*rows)], "cold": []}, "2026-12-05")
  job, *pairs = _rows(text, "dsv3")  # the warm job table, then one row per pair
  assert job[0] == "colocated, split"
  assert [(p[0], p[1]) for p in pairs] == [("0", "warm"), ("1", "warm")]
  assert [_number(x) for x in job[1:]] == [3.0e12, 2.0, 2.5, 1.2]  # median budget 2.5 s
  (annealing,) = _rows(text, "annealing")
  assert _number(annealing[0]) == (1, 2)
  assert [_number(x) for x in annealing[1].split(" / ")] == [0.5, 0.5]
  assert _number(annealing[2]) == pytest.approx(-0.04) and _number(annealing[3]) == -0.10
  (gradient,) = _rows(text, "gradient search")
  assert _number(gradient[0]) == (1, 2)


def test_floors_name_a_proven_optimum_and_the_ties_no_method_can_break():
  # Colocated enumerated at 100.0 s; split bounded at 104.0 s: 100.0 s is the job's best.
  bounds = {"name": "dsv3", "families": {
      "colocated": {"bound": 95.0, "bound_s": 4.2, "fits": [], "size": 1.5e8,
                    "optimum": 100.0, "enumerate_s": 29.7},
      "split": {"bound": 104.0, "bound_s": 40.3, "fits": ["gen", "train"], "size": 5.7e12}}}
  rows = [dict(seed=0, budget_s=2.0, gradient=100.0, random=101.0, annealing=102.0,
               cut_dp=100.0),
          dict(seed=1, budget_s=2.0, gradient=100.0, random=101.0, annealing=102.0,
               cut_dp=103.0)]
  assert search_large.floor_s(bounds) == (100.0, True)
  data = {"warm": [_warm(*rows)], "cold": [], "bounds": [bounds]}
  (f,) = search_large.floors(data)
  assert (f["floor"], f["exact"], f["pairs"], f["gradient_above"]) == (100.0, True, 2, 0.0)
  # The cut DP reaches the proven optimum in seed 0 only; random search and annealing never.
  assert f["at_optimum"] == {"random": 0, "annealing": 0, "cut_dp": 1}

  text = search_large.report(data, "2026-12-06")
  by_family = {r[0]: r[1:] for r in _rows(text, "dsv3") if r[0] in bounds["families"]}
  assert by_family["colocated"][0] == "1.50e+08"
  assert by_family["colocated"][1:] == ["95.00 [4]", "100.00 [30]"]  # value [seconds]
  assert by_family["split"][1:] == ["104.00 [40]", "-"]  # bounded, not enumerated
  (floor,) = [r for r in _rows(text, "dsv3") if r[0] == "100.00"]
  assert _number(floor[2]) == 0.0
  assert [_number(x) for x in floor[3].split(" / ")] == [(0, 2), (0, 2), (1, 2)]

  # Where the least is a bound, no pair is proven stuck.
  loose = {"name": "dsv3", "families": {"split": bounds["families"]["split"]}}
  assert search_large.floor_s(loose) == (104.0, False)
  (f,) = search_large.floors({"warm": [_warm(*rows)], "cold": [], "bounds": [loose]})
  assert (f["floor"], f["exact"]) == (104.0, False)
  assert f["gradient_above"] == pytest.approx(100.0 / 104.0 - 1)
  assert f["at_optimum"] == {"random": 0, "annealing": 0, "cut_dp": 0}


def test_no_pairs_no_gap_above_the_floor():
  bounds = {"name": "dsv3", "families": {
      "split": {"bound": 104.0, "bound_s": 40.3, "fits": [], "size": 5.7e12}}}
  (f,) = search_large.floors({"warm": [], "cold": [], "bounds": [bounds]})
  assert f["pairs"] == 0 and f["gradient_above"] is None
  text = search_large.report({"warm": [], "cold": [], "bounds": [bounds]}, "2026-12-06")
  (floor,) = [r for r in _rows(text, "dsv3") if r[0] == "104.00"]
  assert floor[2] == "-"
