"""The relaxed phase's switch: ``search.optimize(relaxed=...)`` and ``--relaxed``.

``auto`` runs the relaxed (gradient) phase on large spaces only; without it the
discrete phases start from the random starts as drawn and the cut DP's
candidates. The small problem of ``test_search`` (GRPO on Qwen2.5-1.5B, 16
H100, the compact space) is enumerable, so the search without the relaxed
phase is checked against its exhaustive optimum.
"""

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import family_search
from search._src import optimize as optimize_lib
from search._src import relax
from search._src import report
from search._src import shared_relax
from search._src import space as space_lib

FAMILIES = ("colocated", "split")


@pytest.fixture(scope="module")
def optimum(search_job, cluster_2x8, compact_space):
  return {f: search.enumerate_plans(search_job, cluster_2x8, f, space=compact_space,
                                    chunk_size=16384).best_step_time_s for f in FAMILIES}


def _spaces(job, cluster, space=None):
  return [space_lib.build(f, job, cluster, space) for f in FAMILIES]


def test_auto_relaxes_large_spaces_and_searches_without_the_dp_seeds(
    search_job, cluster_2x8, compact_space):
  small = _spaces(search_job, cluster_2x8, compact_space)
  assert not optimize_lib.relaxes("auto", small)
  assert optimize_lib.relaxes("auto", small, dp_seeds=False)
  assert optimize_lib.relaxes("on", small)
  assert not optimize_lib.relaxes("off", small, dp_seeds=False)
  # The measured ends of the rule: the default job (its split family: 1.3e10
  # value vectors) searches without it, Qwen3-235B on 512 GPUs (4.0e12) with it.
  default_job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                         samples_per_prompt=8.0, prompt_len=1024.0,
                         response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
  default = _spaces(default_job, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=8))
  assert 1e10 < max(float(fs.size) for fs in default) < optimize_lib.RELAX_MIN_PLANS
  assert not optimize_lib.relaxes("auto", default)
  moe = cm.RLJob("grpo", cm.models.get("qwen3-235b-a22b"), prompts_per_step=512.0,
                 samples_per_prompt=16.0, prompt_len=1024.0,
                 response=cm.ResponseLength.from_mean_max(4000.0, 16384.0))
  large = _spaces(moe, cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=64))
  assert optimize_lib.relaxes("auto", large)


def test_without_the_relaxed_phase_the_shared_search_finds_the_optimum(
    search_job, cluster_2x8, compact_space, optimum, monkeypatch):
  def no_loop(*args, **kwargs):
    raise AssertionError("the relaxed loop ran")

  monkeypatch.setattr(shared_relax, "run", no_loop)
  monkeypatch.setattr(relax, "run", no_loop)
  res = search.optimize(search_job, cluster_2x8, families=list(FAMILIES), space=compact_space,
                        seed=0)  # auto: a small space
  assert res.feasible and not res.relaxed
  for f in FAMILIES:
    assert np.isnan(res.relaxed_bound_s[f]) and res.history[f].shape == (0,)
    assert res.best_by_family_s[f] == pytest.approx(optimum[f], rel=1e-5), f
  assert res.best_step_time_s == pytest.approx(min(optimum.values()), rel=1e-5)
  text = report.format_result(res).splitlines()
  assert text[0].endswith(", relaxed phase off")
  assert [line.split() for line in text[3:5]] == [
      [f, "-", f"{res.best_by_family_s[f]:.2f}"] for f in FAMILIES]
  one = search.optimize(search_job, cluster_2x8, families=["split"], space=compact_space,
                        relaxed="off")  # a family alone: its own programs
  assert not one.relaxed and one.best_step_time_s == pytest.approx(optimum["split"], rel=1e-5)


def test_the_relaxed_phase_on_reports_its_bound(split_search):
  assert split_search.relaxed
  assert np.isfinite(split_search.relaxed_bound_s["split"])
  assert report.format_result(split_search).splitlines()[0].endswith(", relaxed phase on")


def test_starts_as_drawn_map_onto_values_by_the_relaxed_formulas(
    search_job, cluster_2x8, compact_space):
  fs = space_lib.build("split", search_job, cluster_2x8, compact_space)
  x0, _, _ = fs.init_relaxed(np.random.default_rng(3), 8)
  out = family_search.at_starts(fs, x0)
  assert out.values.shape == x0.shape and out.history_s.shape == (0,)
  assert np.isnan(out.step_time_s).all() and np.isnan(out.penalty).all()
  pools = [fs.index(f"pool.{p}") for p in fs.structure.pools]
  z = np.exp(x0[:, pools] - x0[:, pools].max(1, keepdims=True))
  shares = 1 + z / z.sum(1, keepdims=True) * (cluster_2x8.n_gpus - len(pools))
  np.testing.assert_allclose(out.values[:, pools], shares, rtol=1e-5)
  np.testing.assert_allclose(out.values[:, pools].sum(1), cluster_2x8.n_gpus, rtol=1e-5)
  for j, var in enumerate(fs.vars):
    if var.kind == space_lib.LOG2:
      np.testing.assert_allclose(out.values[:, j], 2.0 ** x0[:, j], rtol=1e-5, err_msg=var.name)


def test_relaxed_must_be_auto_on_or_off(search_job, cluster_2x8):
  with pytest.raises(ValueError, match=r"relaxed='yes' must be one of \('auto', 'on', 'off'\)"):
    search.optimize(search_job, cluster_2x8, relaxed="yes")
