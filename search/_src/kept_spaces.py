"""A family's valid space in a framework's space, checked and kept per process.

Valid spaces (a :class:`~search._src.space.FamilySpace` and its
:class:`~search._src.valid_space.Blocks`) and the stage tables built on them
are kept per process, as compiled programs are: a method called again on the
same problem (a benchmark's warm runs, a sweep of budgets) finds them built.
"""

from __future__ import annotations

import collections
import threading

import jax
import numpy as np

import costmodel as cm
from search._src import frameworks as fw_lib
from search._src import result as result_lib
from search._src import space as space_lib
from search._src import valid_space as valid_space_lib

# Kept values. DeepSeek-V3's split family on 16,384 H800 takes tens of seconds
# to find its valid block rows; its blocks hold 7.3 million rows.
KEPT = 8
_values: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()


def fingerprint(tree) -> tuple:
  """A hashable key of a pytree's structure and values (a job, a cluster)."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return (str(treedef), *((np.asarray(x).dtype.str, np.shape(x), np.asarray(x).tobytes())
                          for x in leaves))


def kept(key, build):
  """``build()``, kept for ``key`` (the last :data:`KEPT` keys)."""
  with _lock:
    if key in _values:
      _values.move_to_end(key)
      return _values[key]
  value = build()
  with _lock:
    _values[key] = value
    while len(_values) > KEPT:
      _values.popitem(last=False)
  return value


def valid_space(job, cluster, family, space, framework) -> tuple:
  """``(key, FamilySpace, Blocks)`` of ``family`` in ``framework``'s space,
  kept per process under ``key``."""
  key = ("space", framework, family, space, fingerprint((job, cluster)))

  def build():
    fs = family_space(job, cluster, family, space, framework)
    return fs, valid_space_lib.Blocks(fs)

  return (key, *kept(key, build))


def clear() -> None:
  """Forgets every kept value (the next call builds them again)."""
  with _lock:
    _values.clear()


def holds(key) -> bool:
  """Whether a value is kept for ``key``."""
  with _lock:
    return key in _values


def family_space(job, cluster, family, space, framework: str = "any"
                  ) -> space_lib.FamilySpace:
  """``family``'s space as :func:`search.optimize` builds it for ``framework``
  (:meth:`Framework.build`: its rules, node layout, ties and forced settings)."""
  fw = fw_lib.get(framework)
  check_family(job, family, framework)
  fs = fw.build(family, job, cluster, space)
  if fs is None:
    raise ValueError(fw.why_empty(family, job, cluster, space))
  return fs


def check_family(job: cm.RLJob, family: str, framework: str) -> None:
  if family not in space_lib.FAMILIES:
    raise ValueError(f"family={family!r} is not one of {space_lib.FAMILIES}")
  if not cm.placement(family).applies_to(job):
    raise ValueError(f"family={family!r} does not apply to algorithm {job.algorithm!r} "
                     f"(it places roles the job lacks; families of the job: "
                     f"{space_lib.default_families(job)})")
  runs = fw_lib.families_for(job, framework, max_staleness=1, partial_rollout=True)
  if cm.placement(family).applies_to(job) and family not in runs:
    raise ValueError(f"family={family!r} is not a placement {framework=} runs for this job "
                     f"(it runs {runs})")


def why_empty(job: cm.RLJob, cluster: cm.Cluster, family: str,
              space: space_lib.SpaceOptions | None = None, framework: str = "any") -> str | None:
  """Why ``family`` holds no valid plan of ``job`` on ``cluster`` in
  ``framework``'s space (None when it holds one): its construction
  (:meth:`Framework.why_empty`) or, failing that, no pool combination of its
  valid space (built once per process, as the baselines keep it).

  Raises:
    ValueError: for an unknown family or framework, or a family the framework
      does not run.
  """
  result_lib.check_arguments(f"family {family!r}", job, cluster)
  fw = fw_lib.get(framework)
  check_family(job, family, framework)
  why = fw.why_empty(family, job, cluster, space)
  if why is None and not len(valid_space(job, cluster, family, space, framework)[2].pools):
    why = f"{family}: no pool combination of {framework}'s space holds a valid layout"
  return why


def space_size(job: cm.RLJob, cluster: cm.Cluster, family: str,
               space: space_lib.SpaceOptions | None = None, framework: str = "any") -> int:
  """Number of valid discrete plans of ``family`` in ``framework``'s space (what
  enumeration scores)."""
  if fw_lib.get(framework).why_empty(family, job, cluster, space) is not None:
    return 0
  return valid_space(job, cluster, family, space, framework)[2].size


