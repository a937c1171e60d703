"""Frozen dataclasses registered as JAX pytrees.

Fields marked with :func:`static_field` are part of the tree structure (hashed,
compared, never traced); every other field is a leaf that ``jit``, ``vmap`` and
``grad`` reach.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any
from typing import TypeVar

import jax
import numpy as np

T = TypeVar("T")


def static_field(**kwargs: Any) -> Any:
  """A dataclass field that belongs to the pytree structure, not its leaves."""
  metadata = dict(kwargs.pop("metadata", {}) or {})
  metadata["static"] = True
  return dataclasses.field(metadata=metadata, **kwargs)


def pytree_dataclass(cls: type[T]) -> type[T]:
  """Makes ``cls`` a frozen dataclass and registers it as a pytree."""
  cls = dataclasses.dataclass(frozen=True)(cls)
  fields = dataclasses.fields(cls)
  data = [f.name for f in fields if not f.metadata.get("static", False)]
  meta = [f.name for f in fields if f.metadata.get("static", False)]
  jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
  return cls


def is_concrete(x: Any) -> bool:
  """True when ``x`` holds plain numbers (Python or NumPy) to check eagerly.

  JAX arrays are never checked: JAX rebuilds these dataclasses with arrays of
  cotangents, batched values or sentinel objects as leaves (``grad``, ``vmap``,
  tree utilities), which must not be held to the rules of user input.
  """
  return isinstance(x, (bool, numbers.Number, np.ndarray, np.generic))


def check_positive(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value is finite and > 0."""
  for name, v in values.items():
    if is_concrete(v):
      arr = np.asarray(v, dtype=float)
      if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{owner}: {name}={v!r} must be a finite number > 0")


def check_nonnegative(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value is finite and >= 0."""
  for name, v in values.items():
    if is_concrete(v):
      arr = np.asarray(v, dtype=float)
      if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{owner}: {name}={v!r} must be a finite number >= 0")


def check_fraction(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value lies in (0, 1]."""
  for name, v in values.items():
    if is_concrete(v):
      arr = np.asarray(v, dtype=float)
      if not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > 1):
        raise ValueError(f"{owner}: {name}={v!r} must lie in (0, 1]")


def replace(obj: T, **changes: Any) -> T:
  """``dataclasses.replace`` for pytree dataclasses."""
  return dataclasses.replace(obj, **changes)
