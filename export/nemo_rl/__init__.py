"""NeMo-RL: its record (:data:`RECORD`): exporter, importer, pin, search rules and names.

``record.py`` holds the data; ``exporter.py`` writes a plan in NeMo-RL's keys;
``importer.py`` reads a run the user has.
"""

from export._src.record import Record
from export.nemo_rl import exporter
from export.nemo_rl import importer
from export.nemo_rl import record

RECORD = Record(
    name=record.NAME, framework=record.FRAMEWORK, pin=record.PIN, exporter=exporter.EXPORTER,
    importer=importer, search=record.SEARCH, from_help=record.FROM_HELP,
    run_options=exporter.run_options)
