"""The frameworks, one record each (:class:`export._src.record.Record`), keyed by name.

Adding a framework is one folder, ``export/<name>/``, and one line here.
"""

from __future__ import annotations

from export import areal
from export import nemo_rl
from export import openrlhf
from export import slime
from export import verl
from export._src.base import Exporter
from export._src.record import EngineDefaults
from export._src.record import Record

RECORDS: dict[str, Record] = {r.name: r for r in (
    verl.RECORD,
    openrlhf.RECORD,
    nemo_rl.RECORD,
    slime.RECORD,
    areal.RECORD,
)}

FRAMEWORKS = tuple(RECORDS)
# Each framework's pin and the engine defaults its record states (its rules of thumb and
# importer use them), read from the records.
PINS = {n: r.pin for n, r in RECORDS.items()}
ENGINE_DEFAULTS: dict[str, EngineDefaults] = {
    n: r.engine_defaults for n, r in RECORDS.items() if r.engine_defaults is not None}


def record(name: str) -> Record:
  """The record of one framework.

  Raises:
    ValueError: when ``name`` is not one of :data:`FRAMEWORKS`.

  Example:
    >>> record("verl").pin
    'verl-project/verl@1dda039'
  """
  try:
    return RECORDS[name]
  except (KeyError, TypeError):
    raise ValueError(f"export: framework={name!r} is not one of {FRAMEWORKS}") from None


def get(name: str) -> Exporter:
  """The exporter of one framework.

  Raises:
    ValueError: when ``name`` is not one of :data:`FRAMEWORKS`.

  Example:
    >>> get("verl").version
    'verl-project/verl@1dda039'
  """
  if name not in RECORDS:
    raise ValueError(f"export.get: framework={name!r} is not one of {FRAMEWORKS}")
  return RECORDS[name].exporter
