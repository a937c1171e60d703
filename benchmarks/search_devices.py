"""How the layout search's time falls with devices (the starts sharded).

The relaxed search's batch of starts is laid out over a 1-D ``jax.sharding``
mesh of every device (``search._src.sharding.shard_starts``). This script runs
the default job's search (GRPO Qwen2.5-7B, 512 x 8 samples, 8 x 8 H100, the
default starts (16) x 100 steps, on-policy, families ``colocated`` and ``split``)
in a fresh process per device count, with that many XLA host (CPU) devices
(``--xla_force_host_platform_device_count``), and prints a markdown table of
the first (compiling) and the second (warm) search's wall time. On a CPU the
devices share the machine's cores, so the figures show the sharding's
overhead and what the cores allow; on accelerators each device brings its
own compute.

Usage, from the repository root::

  python -m benchmarks.search_devices --devices 1,2,4
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from absl import app
from absl import flags
from benchmarks import provenance
from search._src import optimize as optimize_lib

_RESULTS = flags.DEFINE_string("results", "search_devices", "Write the table to benchmarks/results/"
                                "<this>.md with its date, machine and commit ('' to only print).")
_DEVICES = flags.DEFINE_list("devices", ["1", "2", "4"], "Device counts to run.")
_STARTS = flags.DEFINE_integer("starts", optimize_lib.DEFAULT_STARTS, "Search starts per family.")
_STEPS = flags.DEFINE_integer("steps", 100, "Relaxed steps.")

_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import jax
    import costmodel as cm
    import search

    job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=512.0,
                   samples_per_prompt=8.0, prompt_len=1024.0,
                   response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
    cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=8)
    starts, steps = int(sys.argv[1]), int(sys.argv[2])
    out = {"devices": jax.device_count(), "cores": os.cpu_count()}
    for name in ("first", "warm"):
      t = time.perf_counter()
      res = search.optimize(job, cluster, starts=starts, steps=steps, seed=0,
                            compilation_cache=False)
      out[name + "_s"] = time.perf_counter() - t
      out[name + "_compile_s"] = res.compile_time_s
    out["step_time_s"] = res.best_step_time_s
    print(json.dumps(out))
""")


def run(devices: int, starts: int, steps: int) -> dict:
  """One fresh process with ``devices`` host devices; its timings."""
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  proc = subprocess.run([sys.executable, "-c", _CHILD, str(starts), str(steps)], env=env,
                        capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"devices={devices}: the search failed: {proc.stderr[-2000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
  lines = ["| devices | first search (s) | of which compiling (s) | warm search (s) "
           "| best step (s) |",
           "|---:|---:|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['devices']} | {r['first_s']:.1f} | {r['first_compile_s']:.1f} | "
                 f"{r['warm_s']:.2f} | {r['step_time_s']:.2f} |")
  return "\n".join(lines)


def main(argv) -> None:
  del argv
  try:
    counts = [int(d) for d in _DEVICES.value]
  except ValueError:
    counts = []
  if not counts or min(counts) < 1:
    print(f"--devices={','.join(_DEVICES.value)!r} must be positive integers", file=sys.stderr)
    sys.exit(2)
  rows = [run(d, _STARTS.value, _STEPS.value) for d in counts]
  with provenance.recorded(_RESULTS.value, "Search time against devices"):
    print(f"{rows[0]['cores']} CPU cores; starts {_STARTS.value}, steps {_STEPS.value}\n")
    print(table(rows))


if __name__ == "__main__":
  app.run(main)
