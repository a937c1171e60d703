"""A homogeneous GPU cluster."""

from __future__ import annotations

import dataclasses

from costmodel._src import pytree
from costmodel._src.specs import hardware as hw


@pytree.pytree_dataclass
class Cluster:
  """Nodes of identical accelerators.

  Attributes:
    accelerator: The GPU (a :class:`Hardware`, whose figures are leaves).
    gpus_per_node: GPUs per node (NICs are per GPU).
    nodes: Number of nodes.
    scaleup_domain: GPUs sharing one scale-up (NVLink) domain; defaults to
      ``gpus_per_node`` (72 on a GB200 NVL72 rack).
    cpu_cores: CPU cores available for rule-based reward scoring.

  Every field is a pytree leaf: ``jax.jit(estimate)`` traces once for clusters
  of every size, and ``vmap`` can batch them.
  """

  accelerator: hw.Hardware
  gpus_per_node: int = 8
  nodes: int = 1
  scaleup_domain: int = 0
  cpu_cores: int = 0

  def __post_init__(self):
    if isinstance(self.accelerator, str):
      object.__setattr__(self, "accelerator", hw.get(self.accelerator))
    sizes = (self.gpus_per_node, self.nodes, self.scaleup_domain, self.cpu_cores)
    if not all(pytree.is_concrete(v) for v in sizes):  # rebuilt by JAX: traced or batched
      return
    pytree.check_integer("Cluster", 1, rule="a positive integer",
                         gpus_per_node=self.gpus_per_node, nodes=self.nodes)
    pytree.check_integer("Cluster", 0, scaleup_domain=self.scaleup_domain,
                         cpu_cores=self.cpu_cores)
    if self.scaleup_domain == 0:
      object.__setattr__(self, "scaleup_domain", self.gpus_per_node)
    if self.scaleup_domain % self.gpus_per_node and self.gpus_per_node % self.scaleup_domain:
      raise ValueError(
          f"Cluster: scaleup_domain={self.scaleup_domain} must divide or be a "
          f"multiple of gpus_per_node={self.gpus_per_node}")
    if self.cpu_cores == 0:
      object.__setattr__(self, "cpu_cores", 96 * self.nodes)

  @property
  def n_gpus(self) -> int:
    return self.gpus_per_node * self.nodes

  def replace(self, **changes) -> Cluster:
    return dataclasses.replace(self, **changes)
