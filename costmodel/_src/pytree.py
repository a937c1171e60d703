"""Frozen dataclasses registered as JAX pytrees.

Fields marked with :func:`static_field` are part of the tree structure (hashed,
compared, never traced); every other field is a leaf that ``jit``, ``vmap`` and
``grad`` reach.
"""

from __future__ import annotations

import dataclasses
import math
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


def _check_concrete(owner: str, values: dict[str, Any], holds, rule: str) -> None:
  """Raises ``{owner}: {name}={value} must {rule}`` unless every concrete value is
  finite and ``holds`` (an element-wise test on a float array); a string is
  refused (a number written as text, ``"512"``, is not one)."""
  for name, v in values.items():
    if isinstance(v, (str, bytes)):
      raise ValueError(f"{owner}: {name}={v!r} must be a number, not a string")
    x = _number(v)
    if x is not None:  # one number: tested as a float (plans are built by the thousand)
      if not (math.isfinite(x) and holds(x)):
        raise ValueError(f"{owner}: {name}={v!r} must {rule}")
    elif is_concrete(v):
      arr = np.asarray(v, dtype=float)
      if not (np.all(np.isfinite(arr)) and np.all(holds(arr))):
        raise ValueError(f"{owner}: {name}={v!r} must {rule}")


def _number(v: Any) -> float | None:
  """``v`` as a float when it is one real number (Python or NumPy scalar), else None."""
  if isinstance(v, (int, float, np.integer, np.floating)):
    return float(v)
  return None


def check_positive(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value is finite and > 0."""
  _check_concrete(owner, values, lambda a: a > 0, "be a finite number > 0")


def check_nonnegative(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value is finite and >= 0."""
  _check_concrete(owner, values, lambda a: a >= 0, "be a finite number >= 0")


def check_whole(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value is a whole number (a
  parallel degree: ``tp=3.5`` is none; traced values are not checked)."""
  _check_concrete(owner, values, lambda a: a == np.round(a), "be an integer")


def check_fraction(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value lies in (0, 1]."""
  _check_concrete(owner, values, lambda a: (a > 0) & (a <= 1), "lie in (0, 1]")


def check_share(owner: str, **values: Any) -> None:
  """Raises ValueError unless every concrete value lies in [0, 1]."""
  _check_concrete(owner, values, lambda a: (a >= 0) & (a <= 1), "lie in [0, 1]")


def check_at_least(owner: str, minimum: float, /, **values: Any) -> None:
  """Raises ValueError unless every concrete value is finite and >= ``minimum``."""
  _check_concrete(owner, values, lambda a: a >= minimum, f"be >= {minimum:g}")


def check_integer(owner: str, minimum: int, /, *, rule: str = "", **values: Any) -> None:
  """Raises ValueError unless every value is a Python ``int`` (not a bool) >= ``minimum``.

  Args:
    owner: What holds the values (the message's prefix).
    minimum: The smallest value allowed.
    rule: The rule as the message states it (default ``an integer >= minimum``).
    **values: The values by field name.
  """
  for name, v in values.items():
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
      raise ValueError(f"{owner}: {name}={v!r} must be {rule or f'an integer >= {minimum}'}")


def check_number(owner: str, minimum: float, /, **values: Any) -> None:
  """Raises ValueError unless every value is a Python number (not a bool) >= ``minimum``
  (static fields; NaN fails)."""
  for name, v in values.items():
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= minimum:
      raise ValueError(f"{owner}: {name}={v!r} must be a number >= {minimum:g}")


def check_one_of(owner: str, allowed: Any, /, **values: Any) -> None:
  """Raises ValueError unless every value is one of ``allowed``.

  Numeric choices (``allowed`` all numbers) are pytree leaves: a concrete value
  (see :func:`is_concrete`) is checked element-wise, a traced one not at all.
  Any other choice (names, static fields, registry keys) is checked as a member
  of ``allowed``.

  Args:
    owner: What holds the values (the message's prefix; none when empty).
    allowed: The values allowed (a mapping: its keys).
    **values: The values by field name.

  Raises:
    ValueError: ``{owner}: {name}={value!r} is not one of {allowed}``.
  """
  allowed = tuple(allowed)
  prefix = f"{owner}: " if owner else ""
  if all(isinstance(a, numbers.Number) for a in allowed):
    for name, v in values.items():
      x = _number(v)
      if x is not None:
        ok = x in allowed
      else:
        ok = not is_concrete(v) or np.all(np.isin(np.asarray(v, dtype=float), allowed))
      if not ok:
        raise ValueError(f"{prefix}{name}={v!r} must be one of {allowed}")
    return
  for name, v in values.items():
    if v not in allowed:
      raise ValueError(f"{prefix}{name}={v!r} is not one of {allowed}")


def check_instance(owner: str, cls: type, /, *, optional: bool = False,
                   **values: Any) -> None:
  """Raises ValueError unless every value is a ``cls`` (or None when ``optional``)."""
  for name, v in values.items():
    if not (isinstance(v, cls) or (optional and v is None)):
      raise ValueError(f"{owner}: {name}={v!r} must be a {cls.__name__}"
                       + (" or None" if optional else ""))


def check_arguments(function: str, **arguments: tuple[Any, type]) -> None:
  """Raises TypeError naming the first argument that is not of its type:
  ``estimate: job must be an RLJob, got NoneType`` (a public entry point's
  arguments, in the order ``(job, plan, cluster)``)."""
  for name, (value, cls) in arguments.items():
    if not isinstance(value, cls):
      kinds = [c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,))]
      what = " or ".join("None" if k == "NoneType" else k for k in kinds)
      swapped = value is not None and any(isinstance(value, c) for n, (_, c) in arguments.items()
                                          if n != name)
      raise TypeError(f"{function}: {name} must be {what}, got {type(value).__name__}"
                      + (f" (the order is {', '.join(arguments)})" if swapped else ""))


def replace(obj: T, **changes: Any) -> T:
  """``dataclasses.replace`` for pytree dataclasses."""
  return dataclasses.replace(obj, **changes)
