"""slime: its record (:data:`RECORD`): exporter, importer, pin, search rules and names.

``record.py`` holds the data; ``exporter.py`` writes a plan in slime's keys;
``importer.py`` reads a run the user has.
"""

from export._src.record import Record
from export.slime import exporter
from export.slime import importer
from export.slime import record

RECORD = Record(
    name=record.NAME, framework=record.FRAMEWORK, pin=record.PIN, exporter=exporter.EXPORTER,
    importer=importer, search=record.SEARCH, from_help=record.FROM_HELP,
)
