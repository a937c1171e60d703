"""The exporters, keyed by framework name."""

from __future__ import annotations

from export._src import areal
from export._src import nemo_rl
from export._src import openrlhf
from export._src import slime
from export._src import verl
from export._src.base import Exporter

_EXPORTERS = {e.name: e for e in (verl.EXPORTER, openrlhf.EXPORTER, nemo_rl.EXPORTER,
                                        slime.EXPORTER, areal.EXPORTER)}

FRAMEWORKS = tuple(_EXPORTERS)


def get(name: str) -> Exporter:
  """The exporter of one framework.

  Raises:
    ValueError: when ``name`` is not one of :data:`FRAMEWORKS`.

  Example:
    >>> get("verl").version
    'verl-project/verl@1dda039'
  """
  try:
    return _EXPORTERS[name]
  except (KeyError, TypeError):
    raise ValueError(f"export.get: framework={name!r} is not one of {FRAMEWORKS}") from None
