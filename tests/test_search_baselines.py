"""Rules of thumb and the random-search / annealing baselines."""

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import baseline_run
from search._src import evaluate
from search._src import kept_spaces
from search._src import program_cache
from search._src import rules as rules_lib
from search._src import valid_space


@pytest.fixture(scope="module")
def rules(search_job, cluster_2x8):
  return {r.method: r for r in search.rules_of_thumb(search_job, cluster_2x8, max_staleness=1,
                                                      partial_rollout=True)}


def test_every_rule_returns_a_valid_feasible_plan(rules, search_job, cluster_2x8):
  assert set(rules) == {"verl", "openrlhf", "areal", "kv_fit"}
  for r in rules.values():
    assert r.feasible and r.best_plan is not None, r.method
    cm.validate_plan(search_job, r.best_plan, cluster_2x8)
    assert bool(r.best_estimate.feasible)
    assert r.best_step_time_s == pytest.approx(float(r.best_estimate.step_time_s))


def test_rule_layouts(rules, cluster_2x8):
  verl = rules["verl"].best_plan
  assert verl.pool_names == ("all",) and float(verl.engine.tp) == 2.0
  assert float(verl.engine.memory_fraction) == 0.5
  assert float(verl.role("actor").train.zero_stage) == 3.0
  openrlhf = rules["openrlhf"].best_plan
  assert [float(p.gpus) for p in openrlhf.pools] == [8.0, 8.0]
  assert float(openrlhf.engine.memory_fraction) == 0.95
  areal = rules["areal"].best_plan
  assert [float(p.gpus) for p in areal.pools] == [12.0, 4.0]
  assert areal.mode.staleness == 1 and areal.mode.partial_rollout
  kv = rules["kv_fit"]
  gen = float(kv.best_plan.pool("gen").gpus)
  replicas = gen / float(kv.best_plan.engine.tp * kv.best_plan.engine.pp)
  assert float(kv.best_estimate.gen_concurrency) * replicas >= 128 * 8 - 1e-3
  assert gen + float(kv.best_plan.pool("train").gpus) <= cluster_2x8.n_gpus


def test_openrlhf_splits_three_ways_with_a_critic(cluster_2x8):
  ppo = cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
  # The rule alone (rules_of_thumb of a PPO job: test_search_rules).
  r = rules_lib.openrlhf_split(ppo, cluster_2x8)
  assert r.method == "openrlhf" and r.family == "split3" and r.feasible
  # A third of 16 GPUs is 5.3; a training pool whose data-parallel degree can
  # divide 256 samples holds a power of two (4); the engines take the rest.
  assert [float(p.gpus) for p in r.best_plan.pools] == [8.0, 4.0, 4.0]


def test_random_search_and_annealing_never_beat_enumeration(search_job, cluster_2x8,
                                                           compact_space):
  space = compact_space
  exact = search.enumerate_plans(search_job, cluster_2x8, "colocated", space=space,
                                 chunk_size=2048)
  rnd = search.random_search(search_job, cluster_2x8, "colocated", budget_s=0.5, seed=0,
                             space=space, batch=2048)
  sa = search.simulated_annealing(search_job, cluster_2x8, "colocated", budget_s=0.5, seed=0,
                                  space=space, chains=2048)
  for res in (rnd, sa):
    assert res.best_plan is not None
    cm.validate_plan(search_job, res.best_plan, cluster_2x8)
    assert bool(res.best_estimate.feasible)
    assert res.best_step_time_s >= exact.best_step_time_s * (1 - 1e-6)
    assert res.evaluations >= 2048
  # Random samples lie in the space: every top plan's degrees are options.
  for plan, _ in rnd.top:
    assert float(plan.role("actor").train.micro_batch) in space.micro_batches


@pytest.mark.parametrize("chunk_size", [0, -4, 2.5, True])
def test_enumeration_refuses_a_chunk_size_that_is_not_a_positive_integer(
    search_job, cluster_2x8, compact_space, chunk_size):
  with pytest.raises(ValueError, match=rf"enumerate: chunk_size={chunk_size!r} must be "
                                       "a positive integer"):
    search.enumerate_plans(search_job, cluster_2x8, "split", space=compact_space,
                           chunk_size=chunk_size)


def test_a_valid_space_is_built_once_per_process_and_problem(search_job, cluster_2x8,
                                                              compact_space, monkeypatch):
  built = []
  blocks = valid_space.Blocks
  monkeypatch.setattr(valid_space, "Blocks", lambda fs: built.append(fs) or blocks(fs))
  kept_spaces.clear()
  for _ in range(2):
    search.random_search(search_job, cluster_2x8, "split", budget_s=0.0, space=compact_space,
                         batch=64)
  assert len(built) == 1
  # ... and its scorer compiled once: a second evaluator of it reuses the program.
  compiled = program_cache.keys("lean")
  assert compiled  # the lean scorer of the runs above
  search.random_search(search_job, cluster_2x8, "split", budget_s=0.0, space=compact_space,
                       batch=64)
  assert program_cache.keys("lean") == compiled
  # Another batch size is another problem, and so is another space.
  job = search_job.replace(prompts_per_step=64.0)
  search.random_search(job, cluster_2x8, "split", budget_s=0.0, space=compact_space, batch=64)
  search.random_search(search_job, cluster_2x8, "split", budget_s=0.0, batch=64)
  assert len(built) == 3


@pytest.mark.parametrize("method", ["random", "annealing"])
def test_sampled_baselines_look_stages_up_in_tables_with_the_same_scores(
    search_job, cluster_2x8, compact_space, monkeypatch, method):
  # With tables (here from any size) the baselines score rows by label, and
  # each row's score is the one costing every stage on that row gives.
  monkeypatch.setattr(baseline_run, "TABLES_FROM", 0)
  kept_spaces.clear()
  scored = []
  real = baseline_run.Run.scores

  def spy(self, rows, labels=None):
    s = real(self, rows, labels)
    scored.append((self, np.array(rows), s))  # annealing moves its chains in place
    return s

  monkeypatch.setattr(baseline_run.Run, "scores", spy)
  if method == "random":
    res = search.random_search(search_job, cluster_2x8, "split", budget_s=0.0,
                               space=compact_space, batch=512, seed=1, tables=True)
  else:
    res = search.simulated_annealing(search_job, cluster_2x8, "split", budget_s=600.0,
                                     space=compact_space, chains=256, seed=1,
                                     max_evaluations=4 * 256, tables=True)
  assert res.best_plan is not None and len(scored) == (1 if method == "random" else 4)
  run = scored[0][0]
  assert run.labelled and run.ev.tables
  by_row = evaluate.Evaluator(run.fs, chunk=512, factored=False)
  for _, rows, s in scored:
    want = by_row.scores(rows)
    np.testing.assert_allclose(s.step_time_s, want.step_time_s, rtol=2e-6)
    np.testing.assert_array_equal(s.feasible, want.feasible)
    np.testing.assert_allclose(s.excess, want.excess, rtol=2e-6, atol=1e-3)


def test_annealing_proposes_one_valid_neighbour_per_chain(search_job, cluster_2x8, compact_space):
  # Each proposal is a valid neighbour of its chain (one of rounding.neighbours),
  # labelled as the valid space labels it; chains without one keep their plan.
  from search._src import rounding  # pylint: disable=g-import-not-at-top
  _, fs, blocks = kept_spaces.valid_space(search_job, cluster_2x8, "split", compact_space, "any")
  rng = np.random.default_rng(2)
  cur = blocks.sample(rng, 300)
  prop, labels, has = rounding.random_neighbours(fs, blocks, cur, rng)
  assert has.mean() > 0.9
  np.testing.assert_array_equal(prop[~has], cur[~has])
  np.testing.assert_array_equal(labels, blocks.labels_of(prop))
  nbs, own = rounding.neighbours(fs, cur)
  for k in np.flatnonzero(has)[:100]:
    assert (nbs[own == k] == prop[k]).all(1).any(), k
  # Moves spread over the variables and the pool transfers.
  moved = {tuple(np.flatnonzero(p != c)) for p, c in zip(prop[has], cur[has])}
  assert len(moved) > 8


def test_sampled_baselines_build_tables_when_told_or_given_time(search_job, cluster_2x8,
                                                                 compact_space, monkeypatch):
  # None: built from a budget of TABLES_BUDGET_S, else used only once kept;
  # False: never. Runs are seen through the evaluators they build.
  monkeypatch.setattr(baseline_run, "TABLES_FROM", 0)
  kept_spaces.clear()
  runs = []
  real = baseline_run.Run.__init__

  def spy(self, *a, **kw):
    real(self, *a, **kw)
    runs.append(self)

  monkeypatch.setattr(baseline_run.Run, "__init__", spy)
  call = lambda **kw: search.random_search(search_job, cluster_2x8, "split", space=compact_space,
                                           batch=64, **kw)
  call(budget_s=0.0)
  call(budget_s=0.0, tables=False)
  assert [r.labelled for r in runs] == [False, False]
  monkeypatch.setattr(baseline_run, "TABLES_BUDGET_S", 0.0)
  call(budget_s=0.0)  # builds them: the budget reaches the threshold
  monkeypatch.setattr(baseline_run, "TABLES_BUDGET_S", 1e9)
  call(budget_s=0.0)  # finds them kept
  call(budget_s=0.0, tables=False)
  assert [r.labelled for r in runs[2:]] == [True, True, False]
  assert runs[3].ev.tables.keys() == runs[2].ev.tables.keys()


@pytest.mark.parametrize("method", [search.random_search, search.simulated_annealing])
def test_sampled_baselines_refuse_a_tables_value_that_is_not_a_bool(search_job, cluster_2x8,
                                                                     compact_space, method):
  with pytest.raises(ValueError, match=r"tables='yes' must be True, False or None"):
    method(search_job, cluster_2x8, "split", 0.0, space=compact_space, tables="yes")


def test_a_baseline_run_refuses_an_unknown_scorer(search_job, cluster_2x8, compact_space):
  with pytest.raises(ValueError, match=r"scorer='labels' must be 'enumerate' or 'sampled'"):
    baseline_run.Run(search_job, cluster_2x8, "split", compact_space, None, 64, 5,
                   scorer="labels")
