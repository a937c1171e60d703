"""The registered search methods: name -> a function that builds the
:class:`~search._src.methods.base.Method` with its default settings (or
others, as keywords). Adding a method is one module and one line here; the
conformance suite (``tests/test_method_conformance.py``) runs every one.
"""

from __future__ import annotations

import collections.abc

from search._src.methods import annealing
from search._src.methods import base
from search._src.methods import bound
from search._src.methods import cut_dp
from search._src.methods import enumeration
from search._src.methods import gradient
from search._src.methods import random_search


class Registry(collections.abc.Mapping):
  """The registered search methods, read-only: name -> a function that builds
  the :class:`~search._src.methods.base.Method` (``search.METHODS["random"](
  batch=2048)``, or ``search.method("random", batch=2048)``)."""

  def __init__(self, methods: dict):
    self._methods = dict(methods)

  def __getitem__(self, name):
    return self._methods[name]

  def __iter__(self):
    return iter(self._methods)

  def __len__(self) -> int:
    return len(self._methods)

  def __repr__(self) -> str:
    return f"METHODS{tuple(self._methods)}"


METHODS = Registry({
    "optimize": gradient.gradient,
    "random": random_search.random_search,
    "annealing": annealing.annealing,
    "enumerate": enumeration.enumeration,
    "cut_dp": cut_dp.cut_dp,
    "bound": bound.bound,
})


def get(method, **options) -> base.Method:
  """The method ``method``: a registered name (built with ``options``) or a
  :class:`~search._src.methods.base.Method` (returned as is).

  Raises:
    ValueError: for an unknown name, or options given with a Method.
  """
  if isinstance(method, base.Method):
    if options:
      raise ValueError(f"method: options {sorted(options)} given with a Method (build it "
                       "with them instead)")
    return method
  if not isinstance(method, str) or method not in METHODS:
    raise ValueError(f"method={method!r} is not one of {tuple(METHODS)} (or a search.Method)")
  return METHODS[method](**options)
