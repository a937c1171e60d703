"""Pools as Ray groups: each pool written as ``nnodes x n_gpus_per_node``, all fitting
on the cluster's nodes together."""

from __future__ import annotations

import functools
import itertools

import costmodel as cm


@functools.lru_cache(maxsize=4096)
def _fits(demands: tuple[tuple[int, int], ...], free: tuple[int, ...]) -> bool:
  """Whether pools of ``nnodes x per_node`` GPUs fit on nodes with ``free`` GPUs."""
  if not demands:
    return True
  (nnodes, per_node), rest = demands[0], demands[1:]
  classes = sorted({c for c in free if c >= per_node}, reverse=True)
  counts = [free.count(c) for c in classes]

  def choose(i: int, left: int, taken: tuple[tuple[int, int], ...]) -> bool:
    if left == 0:
      new = list(free)
      for c, k in taken:
        for _ in range(k):
          new.remove(c)
          new.append(c - per_node)
      return _fits(rest, tuple(sorted(new, reverse=True)))
    if i == len(classes):
      return False
    for k in range(min(left, counts[i]), -1, -1):
      if choose(i + 1, left - k, taken + ((classes[i], k),)):
        return True
    return False

  return choose(0, nnodes, ())


def node_layouts(sizes: dict[str, int], cluster: cm.Cluster,
                 framework: str) -> dict[str, tuple[int, int]]:
  """Writes each pool as ``(nnodes, n_gpus_per_node)`` with the pools fitting together.

  A framework places a role group as the same number of GPUs on each of
  ``nnodes`` nodes. Each pool takes the fewest nodes that allow it (whole
  nodes, or part of one node, before a split over several nodes), as long as
  all pools still fit on the cluster.
  """
  gpn, nodes = cluster.gpus_per_node, cluster.nodes
  options = {}
  for name, g in sizes.items():
    opts = [(k, g // k) for k in range(1, nodes + 1) if g % k == 0 and g // k <= gpn]
    if not opts:
      raise ValueError(
          f"{framework}: pool {name!r} of {g} GPUs is not nnodes x n_gpus_per_node with the "
          f"same GPUs on every node (at most {nodes} nodes of {gpn} GPUs); use whole nodes, or "
          "a size that splits evenly over the nodes")
    options[name] = opts
  for combo in itertools.product(*options.values()):
    demands = tuple(sorted(combo, key=lambda d: (-d[1], -d[0])))
    if _fits(demands, (gpn,) * nodes):
      return dict(zip(options, combo, strict=True))
  raise ValueError(
      f"{framework}: pools {sizes} cannot be placed together as nnodes x n_gpus_per_node "
      f"(uniform per node) on {nodes} nodes of {gpn} GPUs")
