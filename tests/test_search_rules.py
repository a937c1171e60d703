"""The rules of thumb: their plans and step times, and the vectorised reading of
the checks :func:`costmodel.validate_plan` makes of each candidate layout."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import evaluate
from search._src import rules
from search._src import space as space_lib

_H100 = cm.hardware.get("H100")


def _default_job():
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                 samples_per_prompt=8.0, prompt_len=1024.0,
                 response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
  return job, cm.Cluster(_H100, gpus_per_node=8, nodes=8)


def _ppo_job():
  job = cm.RLJob("ppo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                 samples_per_prompt=8.0, reward_model=cm.models.get("qwen2.5-1.5b"))
  return job, cm.Cluster(_H100, gpus_per_node=8, nodes=2)


def _summary(r):
  p = r.best_plan
  e = p.engine
  layout = {}
  for rp in p.roles:
    for kind, lay in (("train", rp.train), ("infer", rp.infer_layout)):
      if lay is not None:
        layout[f"{rp.role}.{kind}"] = tuple(
            float(getattr(lay, a)) for a in ("tp", "pp", "zero_stage", "offload", "micro_batch"))
  return (r.method, r.family, {q.name: float(q.gpus) for q in p.pools},
          (float(e.tp), float(e.pp), float(e.memory_fraction), float(e.max_seqs)), layout)


def _fsdp(mb, roles=("actor", "reference")):
  """Every layout of ``roles`` FSDP (ZeRO-3, no TP/PP, no offload) at ``mb``."""
  out = {}
  for r in roles:
    if r in ("actor", "critic"):
      out[f"{r}.train"] = (1.0, 1.0, 3.0, 0.0, mb)
    out[f"{r}.infer"] = (1.0, 1.0, 3.0, 0.0, mb)
  return out


_PPO_ROLES = ("actor", "reference", "critic", "reward")

# Layouts recorded from the rules before their checks were vectorised (one
# validate_plan call per candidate row); the step times in seconds, re-recorded
# when the RL step mechanisms (log-prob cost per token, longest-sequence wait,
# trainer-call cost; the rule-based reward in the single controller's process;
# the decode round's attention kernel timed apart from the weight GEMMs)
# changed the cost model, the layouts unchanged.
_PINNED = {
    "default": (
        (("verl", "colocated", {"all": 64.0}, (2.0, 1.0, 0.5, 256.0), _fsdp(8.0)),
         106.81639862060547),
        (("openrlhf", "split", {"gen": 32.0, "train": 32.0}, (1.0, 1.0, 0.95, 256.0),
          _fsdp(8.0)), 159.9066162109375),
        (("kv_fit", "split", {"gen": 32.0, "train": 32.0}, (1.0, 1.0, 0.9, 4096.0),
          _fsdp(8.0)), 159.9066162109375),
    ),
    "ppo": (
        (("verl", "colocated", {"all": 16.0}, (2.0, 1.0, 0.5, 256.0), _fsdp(8.0, _PPO_ROLES)),
         343.3996276855469),
        (("openrlhf", "split3", {"gen": 8.0, "actor": 4.0, "critic": 4.0},
          (1.0, 1.0, 0.95, 256.0), _fsdp(8.0, _PPO_ROLES)), 623.6004028320312),
        (("areal", "split_async_partial", {"gen": 12.0, "train": 4.0}, (1.0, 1.0, 0.9, 1024.0),
          _fsdp(4.0, _PPO_ROLES)), 843.2714233398438),
        (("kv_fit", "split", {"gen": 12.0, "train": 4.0}, (1.0, 1.0, 0.9, 4096.0),
          _fsdp(4.0, _PPO_ROLES)), 960.7586059570312),
    ),
}


@pytest.mark.parametrize("name", ["default", "ppo"])
def test_rule_plans_pinned(name):
  job, cluster = _default_job() if name == "default" else _ppo_job()
  mode = {} if name == "default" else dict(max_staleness=1, partial_rollout=True)
  got = search.rules_of_thumb(job, cluster, **mode)
  for r, (summary, step_s) in zip(got, _PINNED[name], strict=True):
    assert r.feasible, r.infeasible_reason
    assert _summary(r) == summary
    np.testing.assert_allclose(float(r.best_estimate.step_time_s), step_s, rtol=1e-6)


def _random_rows(fs: space_lib.FamilySpace, n: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return np.stack([np.asarray([rng.choice(v.options) for v in fs.vars]) for _ in range(n)])


@pytest.mark.parametrize("name,family", [("default", "split"), ("ppo", "colocated"),
                                         ("ppo", "split3"), ("ppo", "split_async_partial")])
def test_runs_matches_validate_plan(name, family):
  job, cluster = _default_job() if name == "default" else _ppo_job()
  fs = space_lib.build(family, job, cluster)
  # The rules' candidates at a few pool shares, then rows drawn at random.
  rows = []
  for share in (0.25, 0.5, 0.75):
    shares = {p: share if p == fs.rollout_pool else 1.0 for p in fs.structure.pools}
    rows += rules._rows(fs, rules._round_pools(fs, shares), 2.0, 0.5, 1024.0)
  values = np.concatenate([np.stack(rows), _random_rows(fs, 200, 0)])
  want = np.asarray([rules._runs(fs, v) for v in values])
  assert want.any() and not want.all()  # the rows exercise both outcomes
  np.testing.assert_array_equal(fs.runs(values), want)
  kept = rules._running(fs, list(values))
  np.testing.assert_array_equal(np.stack(kept), values[want])


def test_runs_reads_validate_plan_rules_not_the_spaces():
  # ZeRO-3 with TP 2: validate_plan runs it, the space's zero3 rule set does not.
  job, cluster = _default_job()
  fs = space_lib.build("colocated", job, cluster)
  row = rules._rows(fs, {"all": 64.0}, 1.0, 0.5, 1024.0)[0]
  row[fs.index("actor.tp")] = 2.0
  assert row[fs.index("actor.zero")] == 3.0
  assert rules._runs(fs, row)
  np.testing.assert_array_equal(fs.runs(row[None]), [True])
  np.testing.assert_array_equal(fs.valid(row[None]), [False])


def test_scores_with_estimates_matches_estimates():
  job, cluster = _default_job()
  fs = space_lib.build("colocated", job, cluster)
  rows = np.stack(rules._rows(fs, {"all": 64.0}, 2.0, 0.5, 1024.0)[:3])
  ev = evaluate.Evaluator(fs, chunk=8, full=True)
  s, est = ev.scores(rows, with_estimates=True)
  one = ev.estimates(rows)
  assert est.gen_concurrency.shape == (3,)
  for i in range(3):
    assert est.gen_concurrency[i] == float(one[i].gen_concurrency)
    assert s.step_time_s[i] == float(one[i].step_time_s)
  with pytest.raises(ValueError, match="with_estimates=True needs full=True"):
    evaluate.Evaluator(fs, chunk=8).scores(rows, with_estimates=True)
