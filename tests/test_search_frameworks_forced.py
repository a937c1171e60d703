"""The settings a framework forces on every plan are part of its search space.

``Structure.runs_as`` applies the framework's ``Exporter.adapt`` (its weight sync, where it
keeps a role's state) inside ``to_plan``: the relaxed objective, the exact evaluator and
rounding see the plan as the framework runs it, and the plan the search returns is already
that plan. The problem of tests/test_search.py (GRPO on Qwen2.5-1.5B, 16 H100, the compact
space).
"""

import dataclasses
import pathlib

from conftest import assert_tree_allclose
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
import export
import search
from search._src import compile_cache
from search._src import evaluate
from search._src import frameworks as fw_lib
from search._src import relax
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import trace_cache
from search._src import valid_space

_FRAMEWORKS = fw_lib.NAMES[1:]


def _as_any(fs: space_lib.FamilySpace) -> space_lib.FamilySpace:
  """``fs`` with no forced settings: its plans as built before the framework runs them."""
  return dataclasses.replace(fs, structure=dataclasses.replace(fs.structure, runs_as="any"))


@pytest.mark.parametrize("name", _FRAMEWORKS)
def test_to_plan_is_the_plan_as_the_framework_runs_it(name, search_job, cluster_2x8,
                                                      compact_space):
  fw, e = fw_lib.get(name), export.get(name)
  rng = np.random.default_rng(3)
  for fam in fw_lib.families_for(search_job, name, max_staleness=1, partial_rollout=True):
    fs = fw.build(fam, search_job, cluster_2x8, compact_space)
    assert fs.structure.runs_as == name
    rows = valid_space.Blocks(fs).sample(rng, 8)
    traced = jax.jit(fs.to_plan)
    for row in rows:
      plan = fs.to_plan(row)
      assert plan == e.adapt(_as_any(fs).to_plan(row)), (fam, row)
      # One override for every option set the framework exports with: it is static.
      for options in fw.export_options:
        assert e.adapt(plan, **options) == plan, (fam, options)
      # The same plan under jit (what the relaxed loop and the evaluator trace).
      assert_tree_allclose(traced(jnp.asarray(row, jnp.float32)), plan)


def test_forced_settings_by_framework(search_job, cluster_2x8, compact_space):
  # export/verl, nemo_rl, slime exporter.py: the settings each forces.
  rng = np.random.default_rng(4)

  def plan(name, fam):
    fs = fw_lib.get(name).build(fam, search_job, cluster_2x8, compact_space)
    return fs.to_plan(valid_space.Blocks(fs).sample(rng, 1)[0])

  colocated, split = plan("verl", "colocated"), plan("verl", "split")
  assert (colocated.engine.sync_backend, split.engine.sync_backend) == ("per_tensor", "bucketed")
  for p in (colocated, split):  # an FSDP reference's parameters on the host
    assert (p.role("reference").infer_layout.offload, p.role("reference").infer_layout.swap) == (
        1.0, 0.0)
  nemo = plan("nemo_rl", "colocated")
  assert nemo.engine.sync_backend == "ipc" and nemo.role("actor").train.swap == 1.0
  assert plan("nemo_rl", "split").role("actor").train.swap == 0.0
  slime = plan("slime", "split")
  assert slime.engine.sync_backend == "bucketed"
  assert (slime.role("reference").infer_layout.swap, slime.role("reference").infer_layout.offload
          ) == (1.0, 0.0)
  # ``any`` forces nothing: the engine keeps its default weight sync.
  fs = space_lib.build("split", search_job, cluster_2x8, compact_space)
  assert fs.structure.runs_as == "any"
  assert fs.to_plan(valid_space.Blocks(fs).sample(rng, 1)[0]).engine.sync_backend == "per_tensor"


def test_the_evaluator_scores_the_plan_as_run(search_job, cluster_2x8, compact_space):
  # veRL split: the evaluator's step times are cm.estimate of the adapted plans, not of the
  # plans as built (bucketed sync and a host-resident reference change them).
  fs = fw_lib.get("verl").build("split", search_job, cluster_2x8, compact_space)
  rows = valid_space.Blocks(fs).sample(np.random.default_rng(5), 6)
  scores = evaluate.Evaluator(fs, full=True).scores(rows)
  e = export.get("verl")
  raw = _as_any(fs)
  changed = 0
  for row, t in zip(rows, scores.step_time_s, strict=True):
    as_run = float(cm.estimate(search_job, e.adapt(raw.to_plan(row)), cluster_2x8).step_time_s)
    as_built = float(cm.estimate(search_job, raw.to_plan(row), cluster_2x8).step_time_s)
    assert t == pytest.approx(as_run, rel=1e-5)
    changed += abs(as_built / as_run - 1) > 1e-4
  assert changed == len(rows)


def test_ranking_with_the_forced_settings_picks_a_faster_plan(search_job, cluster_2x8,
                                                              compact_space):
  # NeMo-RL colocated swaps the policy's state to the host around generation. Ranked as
  # built, then adapted and re-estimated (top five distinct layouts), the best is a ZeRO-1
  # plan; ranked as run, a ZeRO-3 plan the as-built ranking puts further down is faster.
  fs = fw_lib.get("nemo_rl").build("colocated", search_job, cluster_2x8, compact_space)
  blocks = valid_space.Blocks(fs)
  rows = np.concatenate([blocks.decode(p, 0, int(c)) for p, c in enumerate(blocks.counts)], 0)
  as_run = evaluate.Evaluator(fs, full=True).scores(rows)
  as_built = evaluate.Evaluator(_as_any(fs), full=True).scores(rows)
  best = result_lib.ranking(as_run.step_time_s, as_run.feasible, as_run.excess)[0]
  seen, top = set(), []
  for i in result_lib.ranking(as_built.step_time_s, as_built.feasible, as_built.excess):
    key = result_lib.layout_key(fs.to_plan(rows[i]), "colocated")
    if key not in seen:
      seen.add(key)
      top.append(i)
    if len(top) == 5:
      break
  after = top[int(np.argmin(as_run.step_time_s[top]))]
  assert as_run.feasible[best] and as_run.feasible[after]
  assert as_run.step_time_s[after] > as_run.step_time_s[best] * 1.002
  zero = fs.index("actor.zero")
  assert (rows[best, zero], rows[after, zero]) == (3.0, 1.0)
  assert best not in top


@pytest.mark.parametrize("name", _FRAMEWORKS)
def test_searched_best_is_estimated_as_exported(name, search_job, cluster_2x8, compact_space):
  res = search.optimize(search_job, cluster_2x8, families=["split"], starts=4, steps=10, seed=0,
                        space=compact_space, framework=name, top_k=3)
  assert res.feasible
  # The ranking's step times are the final estimates: nothing is re-estimated after it.
  steps = [float(est.step_time_s) for _, est in res.top]
  assert steps == sorted(steps)
  assert steps[0] == pytest.approx(res.best_by_family_s["split"], rel=1e-6)
  e = export.get(name)
  for plan, est in res.top:
    options = fw_lib.export_options(name, plan, search_job, cluster_2x8)
    assert options is not None
    assert e.adapt(plan, **options) == plan  # already as the framework runs it
    assert float(est.step_time_s) == pytest.approx(
        float(cm.estimate(search_job, plan, cluster_2x8).step_time_s), rel=1e-5)
  # Exported, then imported: the same settings (those the config states), the same step.
  plan = res.best_plan
  options = fw_lib.export_options(name, plan, search_job, cluster_2x8)
  settings = e.to_config(plan, search_job, cluster_2x8, **options)
  back = export.read_config(name, settings, model=search_job.actor, response_mean=1000.0,
                            gpus_per_node=8, engine_max_seqs=float(plan.engine.max_seqs))
  u = export.unexpressed(name)
  assert export.plan_settings(back.plan, u) == export.plan_settings(plan, u)
  assert float(cm.estimate(back.job, back.plan, back.cluster).step_time_s) == pytest.approx(
      float(res.best_estimate.step_time_s), rel=1e-5)


def test_cache_keys_tell_the_framework_apart(search_job, cluster_2x8, compact_space):
  fs = fw_lib.get("verl").build("split", search_job, cluster_2x8, compact_space)
  raw = _as_any(fs)
  assert fs.structure != raw.structure and hash(fs.structure) != hash(raw.structure)
  args = (search_job, cluster_2x8, cm.Efficiency(), jnp.zeros((4, len(fs.vars)), jnp.float32))
  key = lambda s: trace_cache.digest("exact_estimates", s, args, compile_cache.FAST_COMPILE)
  assert key(fs.structure) != key(raw.structure)
  assert key(fs.structure) == key(dataclasses.replace(raw.structure, runs_as="verl"))
  assert relax.Static(fs) != relax.Static(raw)
  assert relax.Static(fs) == relax.Static(fw_lib.get("verl").build("split", search_job,
                                                                       cluster_2x8,
                                                                       compact_space))


def test_traced_programs_are_keyed_by_the_exporters_source(monkeypatch):
  # A traced program embodies Exporter.adapt: an edit of export/ makes a new key.
  before = trace_cache._source_digest()
  read = pathlib.Path.read_bytes
  verl = pathlib.Path(export.__file__).parent / "verl" / "exporter.py"
  monkeypatch.setattr(pathlib.Path, "read_bytes",
                      lambda self: read(self) + (b"#" if self == verl else b""))
  trace_cache._source_digest.cache_clear()
  try:
    assert trace_cache._source_digest() != before
  finally:
    monkeypatch.undo()
    trace_cache._source_digest.cache_clear()
  assert trace_cache._source_digest() == before


def test_unknown_runs_as(search_job, cluster_2x8):
  with pytest.raises(ValueError, match=r"runs_as='megatron' .*one of"):
    space_lib.build("split", search_job, cluster_2x8, runs_as="megatron")
