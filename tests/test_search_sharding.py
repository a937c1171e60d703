"""The starts axis sharded over 4 (CPU) devices gives the single-device plan, and the
families' shared relaxed batch the single-device relaxed step times."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import export
import search

_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax
    import numpy as np
    import costmodel as cm
    import export
    import search
    from search._src import relax, sharding

    job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=128.0,
                   samples_per_prompt=8.0, prompt_len=512.0,
                   response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
    cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
    (x,) = sharding.shard_starts(np.zeros((16, 3), np.float32))
    res = search.optimize(job, cluster, families=["split"], starts=16, steps=60, seed=0,
                          space=search.SpaceOptions.compact(), relaxed="on")
    print(json.dumps({"devices": jax.device_count(),
                      "shards": len(x.sharding.device_set),
                      "shard_rows": [s.data.shape[0] for s in x.addressable_shards],
                      "plan": export.plan_to_dict(res.best_plan),
                      "step_time_s": float(res.best_estimate.step_time_s),
                      "relaxed_bound_s": res.relaxed_bound_s["split"],
                      "shared_s": _shared_run(job, cluster)}))
""")

# The relaxed loop of two families as one batch (search._src.shared), 8 starts each.
_SHARED = textwrap.dedent("""
    def _shared_run(job, cluster):
      import numpy as np
      import costmodel as cm
      import search
      from search._src import frameworks, relax, shared, shared_relax
      spaces = [frameworks.get("any").build(f, job, cluster, search.SpaceOptions.compact(),
                                            "bf16") for f in ("colocated", "split")]
      inits = [fs.init_relaxed(np.random.default_rng(k), 8) for k, fs in enumerate(spaces)]
      outs = shared_relax.run(shared.SharedSpace(spaces), cm.Efficiency(), inits,
                        relax.RelaxConfig(steps=30))
      return [o.step_time_s.tolist() for o in outs]
""")
_SCRIPT = _SCRIPT.replace("(x,) = sharding.shard_starts", _SHARED + "(x,) = sharding.shard_starts")


def test_sharded_search_matches_single_device(search_job, cluster_2x8, compact_space):
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  proc = subprocess.Popen([sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env)
  # Meanwhile, the same search on this process's single device.
  single = search.optimize(search_job, cluster_2x8, families=["split"], starts=16, steps=60,
                           seed=0, space=compact_space, relaxed="on")
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err[-3000:]
  sharded = json.loads(out.strip().splitlines()[-1])
  assert sharded["devices"] == 4
  assert sharded["shards"] == 4 and sharded["shard_rows"] == [4, 4, 4, 4]
  assert sharded["plan"] == export.plan_to_dict(single.best_plan)
  assert np.isclose(sharded["step_time_s"], float(single.best_estimate.step_time_s), rtol=1e-6)
  assert np.isclose(sharded["relaxed_bound_s"], single.relaxed_bound_s["split"], rtol=1e-4)
  # The families' shared batch, sharded over the 4 devices, optimises as on one
  # (a start's relaxed point may drift in flat directions; its step time stays close).
  namespace = {}
  exec(_SHARED, namespace)  # pylint: disable=exec-used (the same function in this process)
  for got, own in zip(sharded["shared_s"], namespace["_shared_run"](search_job, cluster_2x8),
                      strict=True):
    np.testing.assert_allclose(got, own, rtol=0.05)
