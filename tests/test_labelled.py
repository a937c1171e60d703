"""Rows grouped by labels (cmi.estimate_rows with labels, enumeration's
scorer): the element dependence it rests on, the labels enumeration gives its
rows, estimates equal to those grouped by stage inputs, labels that are used,
and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import score_checks

from costmodel import internal as cmi
from costmodel._src.rows import dependence
from costmodel._src.rows import estimate as factored
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import valid_space

X = jax.ShapeDtypeStruct((6,), jnp.float32)


def _deps(fn):
  return [set(d) for d in dependence.element_dependence(fn, X)]


def test_moves_keep_each_element_apart():
  assert _deps(lambda x: x[2]) == [{2}]
  assert _deps(lambda x: (x[1:3], x[jnp.asarray([4, 0])])) == [{1, 2}, {0, 4}]
  assert _deps(lambda x: jnp.concatenate([x[:1], x[5:]]).reshape(2, 1)) == [{0, 5}]
  assert _deps(lambda x: -jnp.floor(x[3])) == [{3}]


def test_arithmetic_reads_all_its_operands():
  assert _deps(lambda x: x[1] * 2.0 + x[3]) == [{1, 3}]
  assert _deps(lambda x: jnp.sum(x[:3])) == [{0, 1, 2}]


def test_nested_jit_is_followed_and_control_flow_lists_too_much():
  inner = jax.jit(lambda a: a[0])
  assert _deps(lambda x: inner(x[2:4])) == [{2}]
  got, = _deps(lambda x: jax.lax.cond(x[0] > 0, lambda y: y[1], lambda y: y[2], x))
  assert {0, 1, 2} <= got  # a superset: the branch and both operands


def test_a_gather_at_positions_read_from_the_argument_reads_all_of_it():
  got, = _deps(lambda x: x[x[0].astype(jnp.int32)])
  assert got == set(range(6))


def _family(job, cluster, space, family):
  fs = fw_lib.get("any").build(family, job, cluster, space, "bf16")
  return fs, valid_space.Blocks(fs)


@pytest.fixture(scope="module")
def split(search_job, cluster_2x8, compact_space):
  return _family(search_job, cluster_2x8, compact_space, "split")


def _all_rows(blocks, per=400):
  out = [blocks.decode(p, 0, min(int(c), per), labels=True)
         for p, c in enumerate(blocks.counts)]
  return tuple(np.concatenate(a, 0) for a in zip(*out))


def test_equal_labels_mean_equal_values(split):
  fs, blocks = split
  rows, labels = _all_rows(blocks)
  label_of = np.asarray(blocks.label_of)
  assert labels.dtype == np.uint32 and labels.shape[1] == label_of.max() + 1
  for j in range(labels.shape[1]):
    cols = np.flatnonzero(label_of == j)
    _, first = np.unique(labels[:, j], return_index=True)
    seen = dict(zip(labels[first, j], rows[first][:, cols].tolist()))
    np.testing.assert_array_equal(rows[:, cols], [seen[k] for k in labels[:, j]])
  sampled, slabels = blocks.sample(np.random.default_rng(0), 300, labels=True)
  for j in range(labels.shape[1]):
    cols = np.flatnonzero(label_of == j)
    for k in np.unique(slabels[:, j])[:20]:
      np.testing.assert_array_equal(np.unique(sampled[slabels[:, j] == k][:, cols], axis=0).shape[0], 1)


@pytest.mark.parametrize("family", ["colocated", "split"])
def test_labelled_scores_are_those_grouped_by_stage_inputs(search_job, cluster_2x8,
                                                          compact_space, family):
  fs, blocks = _family(search_job, cluster_2x8, compact_space, family)
  rows, labels = _all_rows(blocks, per=300)
  sampled, slabels = blocks.sample(np.random.default_rng(1), 200, labels=True)
  rows, labels = np.concatenate([rows, sampled]), np.concatenate([labels, slabels])
  got = evaluate.Evaluator(fs, chunk=256, label_of=blocks.label_of).scores(rows, labels=labels)
  want = evaluate.Evaluator(fs, chunk=256).scores(rows)
  score_checks.assert_same_scores(got, want, min_finite=200)


def test_labels_decide_what_is_shared(split):
  # Every row told it carries the first row's labels takes the first row's
  # stage costs: the labels, not the rows' inputs, group the rows.
  fs, blocks = split
  rows, labels = _all_rows(blocks, per=50)
  ev = evaluate.Evaluator(fs, chunk=128, label_of=blocks.label_of)
  true = ev.scores(rows[:128], labels=labels[:128])
  lied = ev.scores(rows[:128], labels=np.repeat(labels[:1], 128, 0))
  assert not np.allclose(lied.step_time_s, true.step_time_s, equal_nan=True)


def test_a_sweep_of_one_block_costs_the_other_blocks_stages_once(split):
  fs, blocks = split
  p = int(np.argmax(blocks.counts))
  # One period of the last block (the engines) over the first rows of the others.
  rows, labels = blocks.decode(p, 0, len(blocks.rows_of(p, len(blocks.other) - 1)), labels=True)
  job, cluster, st = fs.job, fs.cluster, fs.structure
  plans_of = lambda v: ((st.to_plan(v),), 0)
  kinds = {s.name: s.kind for s in factored.alg.stage_graph(job)}
  groups = jax.jit(lambda r, lab: {n: g[2] for n, g in factored._labelled(
      job, plans_of, r, cluster, lab, blocks.label_of, kinds).items() if g is not None})(
          jnp.asarray(rows, jnp.float32), jnp.asarray(labels))
  engines = len(np.unique(labels[:, -1]))
  assert engines > 1
  assert int(groups["generate"]) == engines
  assert int(groups["actor_update"]) == int(groups["reference"]) == 1


def _estimate_rows(fs, rows, **kw):
  st = fs.structure
  return cmi.estimate_rows(fs.job, lambda v: ((st.to_plan(v),), 0), jnp.asarray(rows, jnp.float32),
                          fs.cluster, **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(label_of=(0,) * 3), r"label_of has 3 entries; it needs one per row element"),
    (dict(label_of=None), r"label_of has None entries"),
    (dict(label_of="wide"), r"label_of=.* names columns outside"),
    (dict(labels="short"), r"labels of shape \(4, 2\) must be \[8, L\]"),
])
def test_bad_labels(split, kw, match):
  fs, blocks = split
  rows, labels = blocks.decode(0, 0, 8, labels=True)
  args = dict(labels=jnp.asarray(labels), label_of=blocks.label_of)
  if kw.get("label_of") == "wide":
    kw = dict(label_of=(labels.shape[1],) * len(blocks.label_of))
  if kw.get("labels") == "short":
    kw = dict(labels=jnp.zeros((4, 2), jnp.uint32))
  with pytest.raises(ValueError, match=match):
    _estimate_rows(fs, rows, **{**args, **kw})


def test_label_of_without_labels(split):
  fs, blocks = split
  with pytest.raises(ValueError, match="label_of needs labels"):
    _estimate_rows(fs, blocks.decode(0, 0, 4), label_of=blocks.label_of)


def test_bad_labels_for_the_evaluator(split):
  fs, blocks = split
  rows, labels = blocks.decode(0, 0, 8, labels=True)
  with pytest.raises(ValueError, match="labels need an evaluator built with label_of"):
    evaluate.Evaluator(fs, chunk=8).scores(rows, labels=labels)
  ev = evaluate.Evaluator(fs, chunk=8, label_of=blocks.label_of)
  with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\*\*32\)"):
    ev.scores(rows, labels=labels.astype(np.int64) - 2**31 * 4)
  with pytest.raises(ValueError, match=r"must be integers, one row per value vector"):
    ev.scores(rows, labels=labels[:5])
  with pytest.raises(ValueError, match="label_of needs factored=True and full=False"):
    evaluate.Evaluator(fs, chunk=8, full=True, label_of=blocks.label_of)
  with pytest.raises(ValueError, match=r"label_of has 2 entries for \d+ variables"):
    evaluate.Evaluator(fs, chunk=8, label_of=(0, 0))


def test_a_stage_reads_nothing_of_a_row_but_what_stage_reads_lists(split):
  # Rows equal on the elements a stage is said to read give it equal inputs,
  # whatever the other elements hold.
  fs, blocks = split
  job, cluster, st = fs.job, fs.cluster, fs.structure
  plans_of = lambda v: ((st.to_plan(v),), 0)
  reads = factored.stage_reads(job, plans_of, jax.ShapeDtypeStruct((len(fs.vars),), jnp.float32),
                               cluster)
  assert any(0 < len(r) < len(fs.vars) for r in reads.values())  # it tells stages apart
  keys = jax.jit(lambda r: factored._keys(job, plans_of, r, cluster))
  a, b = blocks.sample(np.random.default_rng(5), 2).astype(np.float32)
  want = keys(a)
  for name, read in reads.items():
    mixed = b.copy()
    mixed[list(read)] = a[list(read)]
    np.testing.assert_array_equal(keys(mixed)[name], want[name], err_msg=name)


def test_scores_take_rows_of_any_number_type_chunk_by_chunk(split):
  # Each chunk is cast to float32 where it is scored: float64 rows, their
  # float32 cast and nested lists score alike, the last chunk padded.
  fs, blocks = split
  rows, labels = _all_rows(blocks, per=40)
  rows, labels = rows[:150], labels[:150]
  ev = evaluate.Evaluator(fs, chunk=64, label_of=blocks.label_of)
  want = ev.scores(rows.astype(np.float32), labels=labels)
  assert len(want.step_time_s) == 150
  for got in (ev.scores(rows, labels=labels), ev.scores(rows.tolist(), labels=labels)):
    score_checks.assert_same_scores(got, want, min_finite=1)
  assert ev.count == 3 * 150


def test_decoding_any_range_gives_its_rows_one_by_one(split):
  # Ranges that start and end inside runs of every block decode as their rows do.
  fs, blocks = split
  p = int(np.argmax(blocks.counts))
  count = int(blocks.counts[p])
  for start, stop in ((0, count), (1, count - 1), (count // 3, count // 3 + 7), (5, 5)):
    rows, labels = blocks.decode(p, start, stop, labels=True)
    assert len(rows) == len(labels) == stop - start
    for k in range(start, stop, max(1, (stop - start) // 40)):
      one, lab = blocks.decode(p, k, k + 1, labels=True)
      np.testing.assert_array_equal(rows[k - start], one[0])
      np.testing.assert_array_equal(labels[k - start], lab[0])


def test_chunks_hold_every_valid_row_once_in_order(split):
  fs, blocks = split
  size = 97  # not a divisor of any pool combination's count
  got = list(blocks.chunks(size))
  assert all(len(r) == size for r, _ in got[:-1]) and 0 < len(got[-1][0]) <= size
  rows, labels = (np.concatenate(a) for a in zip(*got))
  want = [blocks.decode(p, 0, int(c), labels=True) for p, c in enumerate(blocks.counts)]
  np.testing.assert_array_equal(rows, np.concatenate([w[0] for w in want]))
  np.testing.assert_array_equal(labels, np.concatenate([w[1] for w in want]))
  assert fs.valid(rows).all() and len(rows) == blocks.size


def _chi2_ok(freq, expected):
  dof = len(freq) - 1
  chi2 = float(((freq - expected) ** 2 / expected).sum())
  return chi2 < dof + 5.0 * np.sqrt(2.0 * dof), (chi2, dof)


def test_samples_are_uniform_over_the_valid_plans_with_their_labels(split):
  # Each sampled row is a valid plan with the label enumeration gives it; pool
  # combinations are drawn in proportion to their plans, and under one
  # combination each block's rows equally often (chi-square tests at 5 sigma).
  fs, blocks = split
  rows, labels = (np.concatenate(a) for a in zip(*blocks.chunks(65536)))
  code = {r.tobytes(): k for k, r in enumerate(rows)}
  got, glabels = blocks.sample(np.random.default_rng(3), 200_000, labels=True)
  assert fs.valid(got).all()
  which = np.asarray([code[r.tobytes()] for r in got[:3000]])
  np.testing.assert_array_equal(glabels[:3000], labels[which])
  m = len(blocks.pool_idx)
  pools = np.unique(glabels[:, :m], axis=0, return_inverse=True)[1].reshape(-1)
  assert len(np.unique(pools)) == len(blocks.pools)
  own = np.asarray([np.flatnonzero((blocks.pools == got[k, list(blocks.pool_idx)]).all(1))[0]
                    for k in np.unique(pools, return_index=True)[1]])
  ok, stat = _chi2_ok(np.bincount(pools), blocks.counts[own] / blocks.size * len(got))
  assert ok, stat
  q = int(np.argmax(np.bincount(pools)))
  for i in range(len(blocks.other)):
    lab = glabels[pools == q, m + i]
    n_rows = len(blocks.rows_of(own[q], i))
    start = blocks._offsets[i][blocks.key_index[i][own[q]]]
    assert lab.min() >= start
    freq = np.bincount(lab - start, minlength=n_rows)
    assert len(freq) == n_rows
    ok, stat = _chi2_ok(freq, len(lab) / n_rows)
    assert ok, (i, stat)


def test_labels_of_finds_the_labels_of_valid_plans_and_refuses_others(split):
  fs, blocks = split
  rows, labels = (np.concatenate(a) for a in zip(*blocks.chunks(65536)))
  np.testing.assert_array_equal(blocks.labels_of(rows), labels)
  got, glabels = blocks.sample(np.random.default_rng(4), 500, labels=True)
  np.testing.assert_array_equal(blocks.labels_of(got.astype(np.float32)), glabels)
  bad = got[:3].copy()
  j = fs.index("actor.tp")
  bad[2, j] = 3.0  # not an option
  with pytest.raises(ValueError, match=r"labels_of: row 2 \(.*'actor.tp': 3.0.*\) is not a "
                                       r"valid plan of family 'split'"):
    blocks.labels_of(bad)
  # Options each, but a layout the pool cannot hold: tensor parallel over more
  # GPUs than the training pool has.
  bad = got[:1].copy()
  bad[0, fs.index("pool.train")] = 2.0
  bad[0, j] = 4.0
  assert not fs.valid(bad).any()
  with pytest.raises(ValueError, match="row 0 .* is not a valid plan"):
    blocks.labels_of(bad)


def test_a_row_is_found_exactly_when_it_is_a_valid_plan(split):
  # Samples moved one option at random in one variable: find() agrees with the
  # rule table on every row, and its labels are those of the found rows.
  fs, blocks = split
  rng = np.random.default_rng(6)
  rows = blocks.sample(rng, 3000)
  for k, j in enumerate(rng.integers(0, len(fs.vars), len(rows))):
    opts = np.asarray(fs.vars[j].options)
    rows[k, j] = opts[rng.integers(0, len(opts))]
  labels, found = blocks.find(rows)
  valid = fs.valid(rows)
  assert 0 < valid.sum() < len(rows)
  np.testing.assert_array_equal(found, valid)
  np.testing.assert_array_equal(labels[found], blocks.labels_of(rows[found]))
