"""The large-space benchmark's report (benchmarks/search_large.py) from its data."""

from benchmarks import search_large

_COLD = {"name": "ppo-70b-1024", "seed": 0, "budget_s": 14.3, "gradient": 262.72,
         "random": 292.72, "annealing": 293.60, "cut_dp": 262.72}


def _warm(*rows):
  return {"name": "dsv3", "families": ["colocated", "split"], "sizes": {"colocated": 2.0e8,
          "split": 3.0e12}, "load": 1.2, "rows": list(rows)}


def test_cold_pairs_alone_are_reported():
  text = search_large.report({"warm": [], "cold": [_COLD]}, "2026-12-05")
  assert "Warm (" not in text and "seeds warm" not in text
  assert "Cold (1 seed-job pairs" in text
  # Strictly better than random search and annealing; a tie with the cut DP.
  assert "| random | 0/1 | 100% / 100% | +11.42% | +11.42% |" in text
  assert "| cut_dp | 1/1 | 0% / 100% | +0.00% | +0.00% |" in text
  assert "| ppo-70b-1024 | 0 | cold | 14.3 | 262.72 | 292.72 | 293.60 | 262.72 |" in text


def test_warm_pairs_count_wins_ties_and_gaps():
  rows = [dict(seed=0, budget_s=2.0, gradient=100.0, random=110.0, annealing=90.0,
               cut_dp=100.0),
          dict(seed=1, budget_s=3.0, gradient=100.0, random=101.0, annealing=102.0,
               cut_dp=104.0)]
  text = search_large.report({"warm": [_warm(*rows)], "cold": []}, "2026-12-05")
  assert "| dsv3 | colocated, split | 3.00e+12 | 2 | 2.5 | 1.2 |" in text
  assert "Warm (2 seed-job pairs):" in text and "Cold (" not in text
  assert "| gradient search | 1/2 | - | - | - |" in text
  assert "| annealing | 1/2 | 50% / 50% | -4.00% | -10.00% |" in text
  assert "| cut_dp | 0/2 | 50% / 100% | +2.00% | +0.00% |" in text


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
  text = search_large.report({"warm": [_warm(*rows)], "cold": [], "bounds": [bounds]},
                             "2026-12-06")
  assert "| dsv3 | colocated | 1.50e+08 | 95.00 [4] | 100.00 [30] |" in text
  assert "| dsv3 | split | 5.70e+12 | 104.00 [40] | - |" in text
  # The cut DP reaches the proven optimum in seed 0 only; random search and annealing never.
  assert "| dsv3 | 100.00 | an optimum (a plan) | +0.00% | 0/2 / 0/2 / 1/2 |" in text
  # Where the least is a bound, no pair is proven stuck.
  loose = {"name": "dsv3", "families": {"split": bounds["families"]["split"]}}
  assert search_large.floor_s(loose) == (104.0, False)
  text = search_large.report({"warm": [_warm(*rows)], "cold": [], "bounds": [loose]},
                             "2026-12-06")
  assert "| dsv3 | 104.00 | a bound | -3.85% | 0/2 / 0/2 / 0/2 |" in text
