"""The contract every search method keeps, in the manner of optax's
transformations: three pure-looking functions over a NamedTuple state.

* ``init(problem, seed) -> state``: what to search (:class:`Problem`) and an
  integer seed; no scoring yet.
* ``step(state, scorer) -> state``: one increment of work (a phase, a batch of
  samples, a chunk of the enumeration, a batch of leaf layouts), scored with
  ``scorer`` (:class:`Scorer`). :func:`search.run` checks its budget between
  steps, so a step should take a small part of a run.
* ``result(state) -> Outcome``: the ranked plans found so far, per family
  (:class:`Outcome`); :func:`search.run` ranks them together into one
  :class:`~search._src.result.SearchResult`.

``done(state)`` says when the method has finished its work and
``stoppable(state)`` whether it holds a result worth returning (a run out of
budget stops at the first step after which it does). A method is registered
with one line in :mod:`search._src.methods.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
import math
from typing import Any
from typing import NamedTuple

import numpy as np

import costmodel as cm
from search._src import evaluate
from search._src import result as result_lib
from search._src import space as space_lib


class Problem(NamedTuple):
  """What a method searches (the ``space`` of ``init``).

  Attributes:
    job: The RL job.
    cluster: The cluster.
    families: The placement families to search, each holding some plan of the
      job on the cluster (those that hold none are in ``skipped``).
    framework: ``any`` or the framework whose space is searched.
    options: The discrete options of each variable (None: defaults).
    efficiency: Efficiency parameters of the cost model.
    max_staleness: Largest staleness allowed.
    partial_rollout: Whether partial rollouts may be used.
    budget_s: Wall-time budget of the run (None: until the method is done).
    max_evaluations: Exact evaluations the run may spend (None: no limit).
    progress: Whether to show progress (a bar on a terminal, a line per family).
    top_k: Plans the run returns (a method keeps enough rows to find them).
    skipped: Per family asked for that holds no plan, why.
    t0: ``time.perf_counter()`` when the run began.
  """

  job: cm.RLJob
  cluster: cm.Cluster
  families: tuple[str, ...]
  framework: str = "any"
  options: space_lib.SpaceOptions | None = None
  efficiency: cm.Efficiency = cm.Efficiency()
  max_staleness: int = 0
  partial_rollout: bool = False
  budget_s: float | None = None
  max_evaluations: int | None = None
  progress: bool = False
  top_k: int = 5
  skipped: dict = {}
  t0: float = 0.0


class Scorer:
  """The exact evaluators of one run: built here and counted here.

  Args:
    efficiency: Efficiency parameters every evaluator scores with.
  """

  def __init__(self, efficiency: cm.Efficiency):
    self.efficiency = efficiency
    self._evaluators: list[evaluate.Evaluator] = []

  def evaluator(self, fs: space_lib.FamilySpace, **options) -> evaluate.Evaluator:
    """An :class:`~search._src.evaluate.Evaluator` of ``fs`` with ``options``
    (``full``, ``chunk``, ``shared``, ...), counted in :attr:`evaluations`."""
    return self.adopt(evaluate.Evaluator(fs, self.efficiency, **options))

  def adopt(self, ev: evaluate.Evaluator) -> evaluate.Evaluator:
    """Counts the evaluations of ``ev``, built elsewhere; returns it."""
    if all(e is not ev for e in self._evaluators):
      self._evaluators.append(ev)
    return ev

  @property
  def evaluations(self) -> int:
    """Exact evaluations of every evaluator of the run so far."""
    return sum(ev.count for ev in self._evaluators)


class FamilyPlans(NamedTuple):
  """One family's scored plans: its space, the evaluator that scored them,
  the plans ranked best first (:class:`~search._src.result.Ranked`) and its
  name in the result (None: the family's; ``split+fp8`` for a rollout format
  searched as a space of its own)."""

  fs: space_lib.FamilySpace
  ev: evaluate.Evaluator
  ranked: result_lib.Ranked
  label: str | None = None


class Outcome(NamedTuple):
  """What ``result(state)`` returns.

  Attributes:
    families: Each searched family's scored plans (:class:`FamilyPlans`).
    skipped: Per family that yielded no plan, why.
    fields: Further :class:`~search._src.result.SearchResult` fields the method
      fills (``relaxed_bound_s``, ``history``, ``relaxed``, ``space_size``,
      ``bounds``, ``description``).
    evaluations: Exact evaluations spent (None: the scorer's count).
  """

  families: tuple[FamilyPlans, ...] = ()
  skipped: dict = {}
  fields: dict = {}
  evaluations: int | None = None


def _always(state) -> bool:
  del state
  return True


class Method(NamedTuple):
  """A search method (see the module docstring).

  Attributes:
    name: Its name in results (``SearchResult.method``) and the registry.
    init: ``(problem, seed) -> state``.
    step: ``(state, scorer) -> state``.
    done: ``state -> bool``: the method has finished.
    result: ``state -> Outcome``.
    stoppable: ``state -> bool``: a run out of budget may stop here (default:
      at every step).
    anytime: Whether the method never finishes by itself (sampling), so a run
      needs ``budget_s`` or ``max_evaluations``.
    plans: Whether it returns plans (the bound returns a floor per family).
    description: One line on what it does.
  """

  name: str
  init: Callable[[Problem, int], Any]
  step: Callable[[Any, Scorer], Any]
  done: Callable[[Any], bool]
  result: Callable[[Any], Outcome]
  stoppable: Callable[[Any], bool] = _always
  anytime: bool = False
  plans: bool = True
  description: str = ""


def check_int(function: str, name: str, value, low: int) -> int:
  """``value`` as an int; ValueError naming ``name`` unless an integer >= ``low``."""
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
    raise ValueError(f"{function}: {name}={value!r} must be an integer >= {low}")
  return int(value)


def check_seconds(function: str, name: str, value, allow_none: bool = True) -> None:
  """ValueError naming ``name`` unless ``value`` is a number >= 0 (or None)."""
  if value is None and allow_none:
    return
  if (not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool)
      or math.isnan(value) or value < 0):
    raise ValueError(f"{function}: {name}={value!r} must be "
                     f"{'None or ' if allow_none else ''}a number of seconds >= 0")
