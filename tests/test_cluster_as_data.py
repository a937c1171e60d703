"""A cluster's sizes are data: one compiled program serves every cluster shape.

``Cluster.gpus_per_node``, ``nodes``, ``scaleup_domain`` and ``cpu_cores`` are
pytree leaves, so ``jax.jit(estimate)`` and the search's programs trace once
for every cluster of a GPU type, and each call computes with its own cluster's
sizes (never those of the cluster the program was traced on); ``vmap``
batches clusters of several sizes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from search._src import evaluate
from search._src import relax
from search._src import shared
from search._src import space as space_lib
from search._src import trace_cache
from search._src import valid_space


@pytest.fixture(scope="module")
def job() -> cm.RLJob:
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=32.0,
                  samples_per_prompt=4.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(600.0, 1024.0))


def test_cluster_sizes_are_leaves_and_still_checked(h100):
  a = cm.Cluster(h100, gpus_per_node=8, nodes=2)
  b = cm.Cluster(h100, gpus_per_node=4, nodes=3, cpu_cores=64)
  assert jax.tree.structure(a) == jax.tree.structure(b)
  assert (a.scaleup_domain, a.cpu_cores, b.scaleup_domain, b.cpu_cores) == (8, 192, 4, 64)
  with pytest.raises(ValueError, match=r"Cluster: nodes=0 must be a positive integer"):
    cm.Cluster(h100, nodes=0)
  with pytest.raises(ValueError, match=r"Cluster: gpus_per_node=2.5 must be a positive integer"):
    cm.Cluster(h100, gpus_per_node=2.5)
  with pytest.raises(ValueError, match="scaleup_domain=3 must divide or be a multiple of "
                                       "gpus_per_node=8"):
    cm.Cluster(h100, scaleup_domain=3)


def test_jitted_estimate_traces_once_and_reads_each_clusters_sizes(job, h100):
  # 16 GPUs as two NVLink domains of 8 or eight of 2: TP 4 x PP 2 crosses
  # the domains of the second, so the two step times differ.
  clusters = [cm.Cluster(h100, gpus_per_node=8, nodes=2), cm.Cluster(h100, gpus_per_node=2,
                                                                     nodes=8)]
  plans = [cm.Plan.colocated(job, c, train=cm.Parallel(tp=4.0, pp=2.0),
                               engine=cm.Engine(tp=4.0))
           for c in clusters]
  traces = []

  def step(plan, cluster):
    traces.append(cluster.nodes)
    return cm.estimate(job, plan, cluster).step_time_s

  jitted = jax.jit(step)
  got = [float(jitted(p, c)) for p, c in zip(plans, clusters, strict=True)]
  assert len(traces) == 1
  want = [float(cm.estimate(job, p, c).step_time_s) for p, c in zip(plans, clusters, strict=True)]
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert got[1] > got[0] * 1.01
  # Both clusters at once: their sizes batched like any leaf.
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *clusters)
  batched = jax.vmap(lambda c: cm.estimate(job, plans[0], c).step_time_s)(stacked)
  np.testing.assert_allclose(batched, want, rtol=1e-5)


def test_a_familys_programs_serve_every_cluster_size(job, h100, monkeypatch):
  builds = []
  build = trace_cache._build
  monkeypatch.setattr(trace_cache, "_build",
                      lambda path, *a, **k: builds.append(path) or build(path, *a, **k))
  eff = cm.Efficiency()
  spaces = [space_lib.build("split", job, cm.Cluster(h100, gpus_per_node=4, nodes=n))
            for n in (3, 5)]
  assert spaces[0].structure == spaces[1].structure
  assert spaces[0].var("pool.gen").options[-1] != spaces[1].var("pool.gen").options[-1]
  scored = []
  for fs in spaces:
    ev = evaluate.Evaluator(fs, eff, full=True)
    rows = valid_space.Blocks(fs).sample(np.random.default_rng(0), 8)
    got = ev.scores(rows).step_time_s
    want = [float(cm.estimate(job, fs.to_plan(r), fs.cluster, eff).step_time_s) for r in rows]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    scored.append(len(builds))
  assert scored[1] == scored[0]  # the second cluster built nothing
  # The relaxed objective: one trace for both, each on its own cluster.
  before = relax._value_and_grad._cache_size()
  for fs in spaces:
    x0, _, _ = fs.init_relaxed(np.random.default_rng(1), 4)
    _, step, _, _ = relax.objective_and_grad(fs, eff, x0, np.full(4, 0.3))
    values = np.asarray(jax.vmap(lambda x, fs=fs: fs.relaxed_values(x, fs.cluster.n_gpus))(x0))
    np.testing.assert_allclose(values[:, [fs.index("pool.gen"), fs.index("pool.train")]].sum(1),
                               fs.cluster.n_gpus, rtol=1e-5)
    want = [float(cm.estimate(job, fs.structure.to_plan(jnp.asarray(v)), fs.cluster, eff, tau=0.3)
                  .step_time_s) for v in values]
    np.testing.assert_allclose(step, want, rtol=1e-4)
  assert relax._value_and_grad._cache_size() - before <= 1



def test_a_searchs_shared_program_scores_another_cluster_as_its_own(job, h100, monkeypatch):
  # A search registers its shared program for its families' structures; a full
  # evaluator of the same structure on another cluster size now finds it, and
  # scores with its own cluster.
  monkeypatch.setattr(shared, "_holding", {})  # this test's registrations only
  eff = cm.Efficiency()
  a = cm.Cluster(h100, gpus_per_node=8, nodes=2)
  on_a = [space_lib.build(f, job, a) for f in ("colocated", "split")]
  shared.register(shared.SharedSpace(on_a))
  fs = space_lib.build("split", job, cm.Cluster(h100, gpus_per_node=8, nodes=3))
  ev = evaluate.Evaluator(fs, eff, full=True)
  assert ev.shared is not None and ev.shared.cluster.nodes == 2
  rows = valid_space.Blocks(fs).sample(np.random.default_rng(2), 8)
  want = [float(cm.estimate(job, fs.to_plan(r), fs.cluster, eff).step_time_s) for r in rows]
  np.testing.assert_allclose(ev.scores(rows).step_time_s, want, rtol=1e-5)
