"""The valid space's block rows checked on an outer product of pool sizes and a
block's option grid (:class:`search._src.space_validity.Outer`) against the same
value vectors built in full, and its bad input."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel as cm
from search._src import frameworks as fw_lib
from search._src import space_validity
from search._src import valid_space


def _jobs():
  dense = cm.models.get("qwen2.5-7b")
  ppo = cm.RLJob("ppo", dense, prompts_per_step=256.0, samples_per_prompt=4.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(2000.0, 8192.0),
                 reward_model=cm.models.get("qwen2.5-1.5b"))
  moe = cm.RLJob("grpo", cm.models.get("qwen3-30b-a3b"), prompts_per_step=256.0,
                 samples_per_prompt=8.0, prompt_len=1024.0,
                 response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=8)
  return [(ppo, cluster, "split3"), (ppo, cluster, "colocated"), (moe, cluster, "split")]


@pytest.mark.parametrize("job,cluster,family", _jobs(),
                         ids=["ppo-split3", "ppo-colocated", "moe-split"])
def test_outer_product_rules_equal_the_rules_of_the_full_vectors(job, cluster, family):
  fs = fw_lib.get("any").build(family, job, cluster)
  blocks = valid_space.Blocks(fs)
  rng = np.random.default_rng(0)
  checked = 0
  for i, (name, idx) in enumerate(blocks.other):
    deps = blocks.depends_on(name)
    cols = [blocks.pool_idx[k] for k in deps]
    keys = np.unique(blocks.pools[:, deps], axis=0)
    keys = keys[rng.choice(len(keys), min(len(keys), 6), replace=False)]
    grid = fs.option_grid(idx)
    grid = grid[rng.choice(len(grid), min(len(grid), 3000), replace=False)]
    base = np.asarray([v.options[0] for v in fs.vars], np.float64)
    full = np.tile(base, (len(keys) * len(grid), 1))
    full[:, list(idx)] = np.tile(grid, (len(keys), 1))
    full[:, cols] = np.repeat(keys, len(grid), 0)
    want = fs.valid(full, blocks=(name,)).reshape(len(keys), len(grid))
    got = fs.valid(space_validity.Outer(base, idx, grid, cols, keys), blocks=(name,))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert 0 < want.sum() < want.size  # the sample holds valid and invalid rows
    # The block's valid rows under a key are those the rules accept.
    p = int(np.flatnonzero((blocks.pools[:, deps] == keys[0]).all(-1))[0])
    rows = blocks.rows_of(p, i)
    one = np.tile(base, (len(rows), 1))
    one[:, list(idx)] = rows
    one[:, cols] = keys[0]
    assert fs.valid(one, blocks=(name,)).all()
    checked += 1
  assert checked == len(blocks.other)


def test_outer_refuses_any_read_but_a_column():
  outer = space_validity.Outer(np.zeros(4), [1], np.ones((3, 1)), [0], np.full((2, 1), 8.0))
  assert outer.shape == (2, 3, 4)
  assert outer[..., 0].shape == (2, 1) and outer[..., 1].shape == (1, 3)
  assert float(outer[..., 3]) == 0.0
  with pytest.raises(ValueError, match=r"only values\[..., column\] reads a column, got 2"):
    outer[2]
  with pytest.raises(ValueError, match="reads a column"):
    outer[0, 1]
