"""The batch of relaxed starts laid out over devices (``jax.sharding``), and the
CPU cores a process may spread work over.

The starts are a leading batch axis of the relaxed loop
(:mod:`search._src.relax`); on several devices (accelerators, or XLA host
devices) they are sharded over a 1-D mesh of all of them, each device running
its share of the starts.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np


def shard_starts(*arrays: np.ndarray):
  """Places arrays with a leading starts axis on a 1-D mesh of all devices.

  With one device the arrays are returned as jax arrays unchanged. The starts
  axis must be divisible by the device count (see :func:`pad_starts`).
  """
  devices = jax.devices()
  if len(devices) == 1:
    return tuple(jnp.asarray(a) for a in arrays)
  mesh = Mesh(np.asarray(devices), ("starts",))
  sharding = NamedSharding(mesh, PartitionSpec("starts"))
  return tuple(jax.device_put(jnp.asarray(a), sharding) for a in arrays)


def pad_starts(n: int) -> int:
  """Starts rounded up to a multiple of the device count."""
  d = jax.device_count()
  return -(-n // d) * d


def cores() -> int:
  """CPU cores this process may use."""
  n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return max(1, n or 1)
