"""The progress bar of a search (tqdm on stderr).

A search advances family by family through :data:`PHASES`; the bar counts the
phases done over all families and names the last one. It shows only when
asked for and when stderr is a terminal (logs and pipes stay clean); it is
safe to advance from the threads that search the families.
"""

from __future__ import annotations

import sys
import threading

from tqdm import tqdm

# What a family's search has done when it calls the bar: the relaxed loop
# (compiled on first use), the exact scoring of the rounded candidates, the
# discrete local search.
PHASES = ("relaxed", "rounded", "refined")


class Bar:
  """Progress over ``families`` x :data:`PHASES`.

  Args:
    families: Families searched.
    enabled: Whether to show the bar (it shows only on a terminal).
    stream: Where the bar is drawn (stderr by default).
  """

  def __init__(self, families: int, enabled: bool = True, stream=None):
    self.stream = stream if stream is not None else sys.stderr
    tty = bool(getattr(self.stream, "isatty", lambda: False)())
    self.enabled = bool(enabled) and tty and families > 0
    self.total = families * len(PHASES)
    self.done = 0
    self._lock = threading.Lock()
    self._bar = None

  def __enter__(self) -> Bar:
    if self.enabled:
      self._bar = tqdm(total=self.total, desc="search", unit="phase", file=self.stream,
                       leave=False, dynamic_ncols=True)
    return self

  def phase(self, family: str, name: str) -> None:
    """Records that ``family`` finished phase ``name``."""
    if name not in PHASES:
      raise ValueError(f"progress: phase={name!r} is not one of {PHASES}")
    with self._lock:
      self.done += 1
      if self._bar is not None:
        self._bar.set_postfix_str(f"{family} {name}", refresh=False)
        self._bar.update(1)
        self._bar.refresh()  # phases are seconds apart: draw each one

  def __exit__(self, *exc) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None
