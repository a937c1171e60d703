"""Cluster sizing over node counts: the cold and the warm call.

:func:`search.size_cluster` of one job on one GPU type over several node
counts, in this process with the persistent compilation cache off: the first
call compiles the search's programs, the second reuses them. A cluster's sizes
are data of those programs, so one family's programs serve every node count
and the cold call compiles about as much as one node count's search.

Usage, from the repository root::

  python -m benchmarks.search_sizing
  python -m benchmarks.search_sizing --gpu H20 --nodes 1,2,4,8
"""

from __future__ import annotations

import time

from absl import app
from absl import flags

from benchmarks import provenance

_GPU = flags.DEFINE_string("gpu", "H100", "GPU type (a costmodel.hardware preset name).")
_NODES = flags.DEFINE_list("nodes", ["1", "2", "3", "4"], "Node counts to size over.")
_MODEL = flags.DEFINE_string("model", "qwen2.5-7b", "Model of the GRPO job.")
_RESULTS = flags.DEFINE_string("results", "search_sizing", "Write the table to "
                               "benchmarks/results/<this>.md with its date, machine and "
                               "commit ('' to only print).")


def main(argv):
  del argv
  import costmodel as cm  # pylint: disable=g-import-not-at-top (after absl parses flags)
  import search  # pylint: disable=g-import-not-at-top
  from search._src import compile_cache  # pylint: disable=g-import-not-at-top

  compile_cache.enable(False)
  job = cm.RLJob("grpo", cm.models.get(_MODEL.value), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(600.0, 1024.0))
  nodes = tuple(int(n) for n in _NODES.value)
  walls, compiles = [], []
  for _ in range(2):
    with compile_cache.CompileClock() as clock:
      t0 = time.perf_counter()
      sized = search.size_cluster(job, {_GPU.value: 1.0}, nodes=nodes)
      walls.append(time.perf_counter() - t0)
    compiles.append(clock.seconds)
  text = (f"GRPO on {_MODEL.value} (64 prompts x 4 samples, 512-token prompts, responses "
          f"600 mean / 1,024 max) sized on {_GPU.value} over {', '.join(map(str, nodes))} "
          "node(s), the default families, persistent compilation cache off.\n\n"
          "| call | wall (s) | of which compiling (s) |\n|---|---:|---:|\n"
          f"| cold | {walls[0]:.1f} | {compiles[0]:.1f} |\n"
          f"| warm | {walls[1]:.1f} | {compiles[1]:.1f} |\n\n"
          f"```\n{sized.table()}\n```\n")
  print(text)
  if _RESULTS.value:
    path = provenance.write(_RESULTS.value, "Cluster sizing over node counts", text)
    print(f"wrote {path}")


if __name__ == "__main__":
  app.run(main)
