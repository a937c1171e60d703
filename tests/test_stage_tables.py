"""Stage cost tables (search._src.stage_tables, cmi.estimate_rows with
tables): which stages one block decides, the rows they are costed on, scores
equal to those costed per chunk, tables that are used, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import score_checks

import costmodel as cm
from costmodel import internal as cmi
import search
from search._src import baseline_run
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import stage_tables
from search._src import valid_space


def _family(job, cluster, space, family):
  fs = fw_lib.get("any").build(family, job, cluster, space, "bf16")
  return fs, valid_space.Blocks(fs)


@pytest.fixture(scope="module")
def split(search_job, cluster_2x8, compact_space):
  fs, blocks = _family(search_job, cluster_2x8, compact_space, "split")
  return fs, blocks, stage_tables.build(fs, blocks)


@pytest.fixture(scope="module")
def ppo_split3(cluster_2x8, compact_space):
  job = cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0),
                 reward_model=cm.models.get("qwen3-0.6b"))
  fs, blocks = _family(job, cluster_2x8, compact_space, "split3")
  return fs, blocks, stage_tables.build(fs, blocks)


def _rows(blocks, per=200, sampled=300):
  out = [blocks.decode(p, 0, min(int(c), per), labels=True) for p, c in enumerate(blocks.counts)]
  out.append(blocks.sample(np.random.default_rng(3), sampled, labels=True))
  return tuple(np.concatenate(a, 0) for a in zip(*out))


def _block(blocks, name):
  return [n for n, _ in blocks.other].index(name)


def test_each_stage_is_tabled_by_the_block_that_decides_it(split, ppo_split3):
  fs, blocks, tables = split
  m = len(blocks.pool_idx)
  cover = stage_tables.covering_blocks(fs, blocks)
  assert cover["generate"] == _block(blocks, fs.block_of("engine"))
  assert cover["actor_update"] == cover["reference"] == _block(blocks, fs.block_of("actor"))
  assert tables["generate"][0] == m + cover["generate"]
  # Every generation, inference and training stage of the job is one block's.
  assert set(tables) == set(cover) == {"generate", "old_log_prob", "reference", "actor_update"}
  fs3, blocks3, tables3 = ppo_split3
  cover3 = stage_tables.covering_blocks(fs3, blocks3)
  assert cover3["critic_update"] == cover3["values"] == _block(blocks3, fs3.block_of("critic"))
  assert cover3["reward"] == _block(blocks3, fs3.block_of("reward"))
  for name, (col, costs) in tables3.items():
    assert len(jax.tree.leaves(costs)[0]) == blocks3.total_rows(col - len(blocks3.pool_idx))


def test_label_rows_are_valid_plans_in_the_order_of_the_labels(split):
  fs, blocks, _ = split
  for i, (_, idx) in enumerate(blocks.other):
    table = blocks.label_rows(i)
    assert len(table) == blocks.total_rows(i)
    assert fs.valid(table).all()
    rows, labels = _rows(blocks)
    col = len(blocks.pool_idx) + i
    np.testing.assert_array_equal(table[labels[:, col]][:, list(idx)], rows[:, list(idx)])


@pytest.mark.parametrize("which", ["split", "ppo_split3"])
def test_scores_with_tables_are_those_costed_per_chunk(which, request):
  fs, blocks, tables = request.getfixturevalue(which)
  rows, labels = _rows(blocks)
  got = evaluate.Evaluator(fs, chunk=256, label_of=blocks.label_of, tables=tables).scores(
      rows, labels=labels)
  want = evaluate.Evaluator(fs, chunk=256).scores(rows)
  score_checks.assert_same_scores(got, want, min_finite=100)


def test_the_tables_are_read(split):
  # Generation twice as slow in the table: plans whose step waits on it slow down.
  fs, blocks, tables = split
  rows, labels = _rows(blocks, per=50, sampled=0)
  col, gen = tables["generate"]
  slow = dict(tables, generate=(col, gen._replace(time_s=gen.time_s * 2.0)))
  true = evaluate.Evaluator(fs, chunk=128, label_of=blocks.label_of, tables=tables).scores(
      rows, labels=labels)
  lied = evaluate.Evaluator(fs, chunk=128, label_of=blocks.label_of, tables=slow).scores(
      rows, labels=labels)
  ok = np.isfinite(true.step_time_s)
  assert (lied.step_time_s[ok] > true.step_time_s[ok] * 1.01).mean() > 0.5


def test_enumeration_with_tables_finds_the_same_plans(search_job, cluster_2x8, compact_space,
                                                       monkeypatch):
  want = search.enumerate_plans(search_job, cluster_2x8, "split", compact_space)
  monkeypatch.setattr(baseline_run, "TABLES_FROM", 0)
  got = search.enumerate_plans(search_job, cluster_2x8, "split", compact_space)
  assert got.best_plan == want.best_plan
  np.testing.assert_allclose([float(e.step_time_s) for _, e in got.top],
                             [float(e.step_time_s) for _, e in want.top], rtol=1e-6)


def test_stage_cost_rows_are_each_plans_stage_costs(split):
  fs, blocks, _ = split
  rows = blocks.decode(0, 0, 3)
  st = fs.structure
  costs = cmi.stage_cost_rows(fs.job, lambda v: ((st.to_plan(v),), 0),
                             jnp.asarray(rows, jnp.float32), fs.cluster)
  for k, row in enumerate(rows.astype(np.float32).astype(np.float64)):
    est = cm.estimate(fs.job, fs.to_plan(row), fs.cluster)
    for name, cost in costs.items():
      i = est.stage_names.index(name)
      np.testing.assert_allclose(float(cost.time_s[k]), float(est.duration_s[i]), rtol=1e-5)


def _estimate_rows(fs, rows, labels, **kw):
  st = fs.structure
  return cmi.estimate_rows(fs.job, lambda v: ((st.to_plan(v),), 0), jnp.asarray(rows, jnp.float32),
                          fs.cluster, labels=None if labels is None else jnp.asarray(labels),
                          **kw)


def test_a_label_outside_the_table_gives_nan_not_another_plan(split):
  fs, blocks, tables = split
  rows, labels = blocks.decode(0, 0, 4, labels=True)
  col, _ = tables["generate"]
  labels[1, col] = blocks.total_rows(col - len(blocks.pool_idx))
  est, = _estimate_rows(fs, rows, labels, label_of=blocks.label_of, tables=tables)
  t = np.asarray(est.step_time_s)
  assert np.isnan(t[1]) and np.isfinite(np.delete(t, 1)).all()


@pytest.mark.parametrize("case, match", [
    ("no labels", r"tables for \['generate'\] need labels"),
    ("sync stage", r"tables\['weight_sync'\]: 'weight_sync' is not a generation, inference"),
    ("column", r"tables\['generate'\] is indexed by column 99; labels have \d+"),
])
def test_bad_tables_for_estimate_rows(split, case, match):
  fs, blocks, tables = split
  rows, labels = blocks.decode(0, 0, 4, labels=True)
  gen = tables["generate"]
  kw = dict(label_of=blocks.label_of, tables={"generate": gen})
  if case == "no labels":
    labels, kw = None, dict(tables={"generate": gen})
  elif case == "sync stage":
    kw["tables"] = {"weight_sync": gen}
  else:
    kw["tables"] = {"generate": (99, gen[1])}
  with pytest.raises(ValueError, match=match):
    _estimate_rows(fs, rows, labels, **kw)


def test_bad_tables_for_the_evaluator(split):
  fs, blocks, tables = split
  with pytest.raises(ValueError, match="tables need label_of"):
    evaluate.Evaluator(fs, chunk=8, tables=tables)
  rows, labels = blocks.decode(0, 0, 8, labels=True)
  col, _ = tables["generate"]
  labels[3, col] = 10**6
  ev = evaluate.Evaluator(fs, chunk=8, label_of=blocks.label_of, tables=tables)
  with pytest.raises(ValueError, match=rf"labels column {col} reaches 1000000; 'generate'"
                                       r"'s table has \d+ rows"):
    ev.scores(rows, labels=labels)
  with pytest.raises(ValueError, match=r"names=\('nap',\) holds \['nap'\], not stages"):
    cmi.stage_cost_rows(fs.job, lambda v: ((fs.structure.to_plan(v),), 0),
                       jnp.asarray(rows, jnp.float32), fs.cluster, names=("nap",))
