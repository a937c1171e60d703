"""A small block-style YAML writer for the nested dicts the exports return."""

from __future__ import annotations

import math
from typing import Any

_YAML_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _yaml_scalar(v: Any) -> str:
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, int):
    return str(v)
  if isinstance(v, float):
    if math.isnan(v):
      return ".nan"
    if math.isinf(v):
      return ".inf" if v > 0 else "-.inf"
    return repr(v)
  if isinstance(v, str):
    looks_number = True
    try:
      float(v)
    except ValueError:
      looks_number = False
    if (v and set(v) <= _YAML_PLAIN and v.lower() not in _YAML_WORDS and not looks_number
        and v[0] not in "-."):
      return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
  raise ValueError(f"to_yaml: value {v!r} of type {type(v).__name__} is not a YAML scalar")


def to_yaml(d: dict[str, Any], indent: int = 2) -> str:
  """Block-style YAML for nested dicts of scalars (and lists of scalars).

  Strings that YAML would read as something else (``true``, ``1e3``, ``""``)
  are double-quoted; lists are written in flow style.

  Example:
    >>> print(to_yaml({"cluster": {"num_nodes": 2, "gpus_per_node": 8}}), end="")
    cluster:
      num_nodes: 2
      gpus_per_node: 8
  """
  lines: list[str] = []

  def emit(node: dict, depth: int) -> None:
    for k, v in node.items():
      key = _yaml_scalar(str(k))
      pad = " " * (indent * depth)
      if isinstance(v, dict):
        if v:
          lines.append(f"{pad}{key}:")
          emit(v, depth + 1)
        else:
          lines.append(f"{pad}{key}: {{}}")
      elif isinstance(v, (list, tuple)):
        lines.append(f"{pad}{key}: [{', '.join(_yaml_scalar(x) for x in v)}]")
      else:
        lines.append(f"{pad}{key}: {_yaml_scalar(v)}")

  emit(d, 0)
  return "\n".join(lines) + "\n"
