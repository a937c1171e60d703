"""The one in-memory cache of the search's compiled programs, per process.

Every compiled program the search runs is kept here, keyed by its kind and
the key its builder names (the structure it is specialised on, the tree,
shapes and dtypes of its arguments, or its file on disk): the exact programs
(:mod:`search._src.exact_programs`), the shared spaces' programs, the relaxed
loop's, and the lean scorers of enumeration and the baselines. Their callers
(:mod:`search._src.trace_cache`, which also keeps traced programs on disk, and
:func:`search._src.exact_programs.compiled_once`) build a program once here;
a second caller of the same key waits for the first's build instead of
starting its own. JAX's persistent compilation cache on disk is
:mod:`search._src.compile_cache`.

:func:`clear` empties it, as a new process starts (for tests).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Hashable
import threading

import jax
import numpy as np

_lock = threading.Lock()
_programs: dict[tuple, object] = {}  # (kind, key) -> compiled program
_building: dict[tuple, threading.Lock] = {}  # held while a program is built


def shape_key(args: tuple) -> tuple:
  """The tree, shapes and dtypes of ``args``: what a compiled program is
  specialised on besides its static arguments."""
  leaves, tree = jax.tree_util.tree_flatten(args)
  return (str(tree), tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves))


def get(kind: str, key: Hashable, build: Callable[[], object], on_hit: Callable[[], None]
        | None = None):
  """The program of ``(kind, key)``, built by ``build()`` once per process.

  Args:
    kind: The program's kind (``lean``, ``labelled``, ``traced``, ...).
    key: What else distinguishes it (static arguments, :func:`shape_key`).
    build: Builds (traces, lowers and compiles) the program.
    on_hit: Called when the program was built already (or by another caller
      that this one waited for); not when ``build`` ran here.
  """
  full = (kind, key)
  with _lock:
    program = _programs.get(full)
    building = _building.setdefault(full, threading.Lock())
  if program is not None:
    if on_hit is not None:
      on_hit()
    return program
  with building:  # a second caller of the same program waits for the first's
    with _lock:
      program = _programs.get(full)
    if program is not None:
      if on_hit is not None:
        on_hit()
      return program
    program = build()
    with _lock:
      return _programs.setdefault(full, program)


def keys(kind: str | None = None) -> tuple[tuple, ...]:
  """The ``(kind, key)`` of every program held (of ``kind`` when given)."""
  with _lock:
    return tuple(k for k in _programs if kind is None or k[0] == kind)


def clear() -> None:
  """Forgets every compiled program, as a new process starts."""
  with _lock:
    _programs.clear()
    _building.clear()
