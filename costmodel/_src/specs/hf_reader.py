"""Typed access to one Hugging Face ``config.json`` dict, with a strict mode.

A :class:`Reader` hands out the values of a config's keys with their types and
ranges checked; every error names the source, the key and the value. In
strict mode (the shipped table of model facts is read this way) a key the
parser asks for must be present even when ``transformers`` has a default for
it, and :meth:`Reader.check_all_read` refuses any key no parser read, so a
misspelt or unmodelled fact cannot pass silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUIRED = object()


class Reader:
  """Typed access to one config dict; errors name the source and key."""

  def __init__(self, cfg: Mapping[str, Any], source: str, strict: bool = False):
    self.cfg = cfg
    self.source = source
    self.strict = strict
    self.read: set[str] = {"model_type"}

  def has(self, key: str) -> bool:
    """Whether ``key`` is present and not null (marks it read)."""
    self.read.add(key)
    return key in self.cfg and self.cfg[key] is not None

  def get(self, key: str, default: Any = REQUIRED) -> Any:
    """The raw value of ``key``; ``default`` when absent (strict: an error)."""
    self.read.add(key)
    if key in self.cfg and self.cfg[key] is not None:
      return self.cfg[key]
    if key in self.cfg and default is not REQUIRED:
      return default  # present and null: the default applies
    if default is REQUIRED or self.strict:
      model_type = self.cfg.get("model_type")
      raise ValueError(
          f"{self.source}: missing required key {key!r} for {model_type=}")
    return default

  def integer(self, key: str, default: Any = REQUIRED, minimum: int = 1) -> int:
    v = self.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
      raise ValueError(f"{self.source}: {key}={v!r} must be an integer")
    if v < minimum:
      what = "positive" if minimum == 1 else f">= {minimum}"
      raise ValueError(f"{self.source}: {key}={v!r} must be {what}")
    return v

  def number(self, key: str, default: Any = REQUIRED, low: float = 0.0,
             high: float = float("inf")) -> float:
    v = self.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low < v <= high:
      raise ValueError(f"{self.source}: {key}={v!r} must be a number in ({low}, {high}]")
    return float(v)

  def flag(self, key: str, default: Any = REQUIRED) -> bool:
    v = self.get(key, default)
    if not isinstance(v, bool):
      raise ValueError(f"{self.source}: {key}={v!r} must be true or false")
    return v

  def layer_list(self, key: str, n_layers: int) -> list[int]:
    v = self.get(key, [])
    if not isinstance(v, list) or any(
        isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers
        for i in v):
      raise ValueError(f"{self.source}: {key}={v!r} must be a list of layer "
                       f"indices in [0, {n_layers})")
    return v

  def choice_list(self, key: str, n_layers: int, choices: tuple[str, ...]) -> list[str]:
    """A per-layer list of names (``layer_types``), each one of ``choices``."""
    v = self.get(key)
    if (not isinstance(v, list) or len(v) != n_layers
        or any(not isinstance(t, str) or t not in choices for t in v)):
      raise ValueError(f"{self.source}: {key}={v!r} must list one of {choices} for each "
                       f"of the {n_layers} layers")
    return v

  def head_dim(self, hidden: int, n_heads: int) -> int:
    if self.has("head_dim"):
      return self.integer("head_dim")
    if hidden % n_heads:
      raise ValueError(
          f"{self.source}: hidden_size={hidden} is not divisible by "
          f"num_attention_heads={n_heads}; give head_dim explicitly")
    return hidden // n_heads

  def check_all_read(self) -> None:
    """Strict mode: refuses keys that no parser read."""
    unknown = sorted(set(self.cfg) - self.read)
    if self.strict and unknown:
      raise ValueError(f"{self.source}: unknown key(s) {unknown} for "
                       f"model_type={self.cfg.get('model_type')!r}: no parser reads them")
