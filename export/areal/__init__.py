"""AReaL: its record (:data:`RECORD`): exporter, importer, pin, search rules and names.

``record.py`` holds the data; ``exporter.py`` writes a plan in AReaL's keys;
``importer.py`` reads a run the user has.
"""

from export._src.record import Record
from export.areal import exporter
from export.areal import importer
from export.areal import record

RECORD = Record(
    name=record.NAME, framework=record.FRAMEWORK, pin=record.PIN, exporter=exporter.EXPORTER,
    importer=importer, search=record.SEARCH, from_help=record.FROM_HELP,
    engine_defaults=record.ENGINE_DEFAULTS)
