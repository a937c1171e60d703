"""veRL: its record (:data:`RECORD`): exporter, importer, pin, search rules and names.

``record.py`` holds the data; ``exporter.py`` writes a plan in veRL's keys;
``importer.py`` reads a run the user has.
"""

from export._src.record import Record
from export.verl import exporter
from export.verl import importer
from export.verl import record
from export.verl import run_settings

RECORD = Record(
    name=record.NAME, framework=record.FRAMEWORK, pin=record.PIN, exporter=exporter.EXPORTER,
    importer=importer, search=record.SEARCH, from_help=record.FROM_HELP,
    engine_defaults=record.ENGINE_DEFAULTS, run_options=run_settings.run_options,
    run_keeps=run_settings.run_keeps)
