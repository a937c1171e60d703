"""OpenRLHF: its record (:data:`RECORD`): exporter, importer, pin, search rules and names.

``record.py`` holds the data; ``exporter.py`` writes a plan in OpenRLHF's keys;
``importer.py`` reads a run the user has.
"""

from export._src.record import Record
from export.openrlhf import exporter
from export.openrlhf import importer
from export.openrlhf import record

RECORD = Record(
    name=record.NAME, framework=record.FRAMEWORK, pin=record.PIN, exporter=exporter.EXPORTER,
    importer=importer, search=record.SEARCH, from_help=record.FROM_HELP,
    engine_defaults=record.ENGINE_DEFAULTS,
    # vLLM's own max_num_seqs: OpenRLHF has no flag for it
    run_options=lambda plan: {"vllm_default_max_seqs": True})
