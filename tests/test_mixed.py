"""Mixed GPU types: the search assigns the rollout and training pools to types.

Prices here are test inputs (a fast type at 3 per GPU-hour, a cheap one at
1), not market figures.
"""

from __future__ import annotations

import pytest

import costmodel as cm
import search

PRICES = {"H800": 3.0, "H20": 1.0}
GROUPS = {"H800": 1, "H20": 2}
ASYNC = (cm.Mode(staleness=1),)


def _job(prompt, mean, longest):
  # Same static structure for both jobs (epochs, mini-batches, bins): the
  # compiled estimates are shared.
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=128.0,
                  samples_per_prompt=8.0, prompt_len=prompt,
                  response=cm.ResponseLength.from_mean_max(mean, longest, bins=32))


@pytest.fixture(scope="module")
def results():
  gen_bound = _job(256.0, 3000.0, 12000.0)
  train_bound = _job(4096.0, 64.0, 256.0)
  return (search.mixed_cluster(gen_bound, GROUPS, PRICES, modes=ASYNC),
          search.mixed_cluster(train_bound, GROUPS, PRICES, modes=ASYNC))


def _cost(o):
  return o.cost_per_hour * o.step_time_s / 3600.0


def test_mixed_beats_single_type_on_cost_for_a_generation_bound_job(results):
  gen, _ = results
  best = gen.best
  assert best.gen_gpu == "H20" and best.train_gpu == "H800"
  for gpu, single in gen.single_type.items():
    assert single is not None, gpu
    assert best.cost_per_step < single.cost_per_step, gpu
  # Each stage ran on its pool's GPU: the rollout pool is the H20's.
  pools = {p.name: p.accelerator.name for p in best.plan.pools}
  assert pools == {"gen": "H20", "train": "H800"}
  assert best.cost_per_step == pytest.approx(_cost(best))


def test_single_type_wins_for_a_training_bound_job(results):
  _, train = results
  assert train.best.colocated and train.best.gen_gpu == "H800"
  mixed = [o for o in train.options if o.feasible and o.gen_gpu != o.train_gpu]
  assert mixed and all(o.cost_per_step > train.best.cost_per_step for o in mixed)
  # The rule of thumb (train on the fast GPUs, generate on the cheap ones)
  # costs more here.
  assert train.rule_of_thumb.cost_per_step > train.single_type["H800"].cost_per_step


def test_options_are_ranked_by_cost_and_priced_by_pool(results):
  gen, _ = results
  costs = [o.cost_per_step for o in gen.options]
  assert costs == sorted(costs)
  o = next(o for o in gen.options if o.gen_gpu == "H20" and o.gen_nodes == 2
           and o.train_gpu == "H800")
  assert o.cost_per_hour == pytest.approx(8 * (2 * 1.0 + 1 * 3.0))
  # Same-type splits never use more nodes than the group has.
  assert all(o.gen_nodes + o.train_nodes <= GROUPS[o.gen_gpu]
             for o in gen.options if o.gen_gpu == o.train_gpu)
  print("\n" + gen.table())


def test_bad_groups_are_rejected():
  job = _job(256.0, 100.0, 400.0)
  with pytest.raises(ValueError, match="no price"):
    search.mixed_cluster(job, {"H800": 1, "B200": 1}, PRICES)
  with pytest.raises(ValueError, match="whole node count"):
    search.mixed_cluster(job, {"H800": 0}, PRICES)
  with pytest.raises(ValueError, match="H20=-1"):
    search.mixed_cluster(job, GROUPS, {"H800": 3.0, "H20": -1})
