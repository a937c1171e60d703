"""Exports of a concrete plan to the frameworks that run it, and plan files.

One :class:`Exporter` per framework, keyed by name (:data:`FRAMEWORKS`:
veRL, OpenRLHF, NeMo-RL, slime, AReaL; :func:`get`); each names the framework
version its keys and flags were checked against. Only what a
framework's configuration can express is exported: anything else (a pool
that is not ``nnodes x n_gpus_per_node``, a parallel degree the backend
lacks, a role placed where the keys cannot put it, a staleness the recipe
cannot bound) raises ``ValueError`` naming the setting and why.

Each framework is one folder, ``export/<name>/``, and one :class:`Record`
(:data:`RECORDS`, :func:`record`): its exporter, importer, version pin
(:data:`PINS`), the engine defaults its importer and rules of thumb use
(:data:`ENGINE_DEFAULTS`), the rules its search space follows
(:class:`SearchRules`) and its command-line names; the search and the command
lines read the records.

>>> import export
>>> verl = export.get("verl")
>>> overrides = verl.to_config(plan, job, cluster, strategy="megatron")  # doctest: +SKIP
>>> print(verl.render(overrides))  # doctest: +SKIP

``Parallel.offload`` (the CPU optimizer) and ``Parallel.swap`` (a role's state
moved to the host between its stages) map to each framework's own keys, and
``Exporter.adapt(plan)`` is the plan as that framework runs it (its weight
sync, where it keeps each role's state); ``Exporter.export`` applies it, and
``export.adapt(framework, job, plan, cluster)`` returns the adapted plan with one
line per setting it changed and the framework code that forces it. What a
framework cannot run at all stays a refusal.

Imports read the run a user already has (veRL overrides, a launch script or
YAML; an OpenRLHF command line; a NeMo-RL YAML; a slime command line; an AReaL
YAML) into the job, plan and cluster, taking what no config states (the mean
response length, the architecture behind a model path) from keywords:

>>> job, plan, cluster = export.read_config(  # doctest: +SKIP
...     "verl", "overrides.txt", model="qwen3-8b", response_mean=900)

Plan files read back: ``export.read_plan(path).plan`` is the plan that
``export.write_plan(path, plan)`` wrote (with its job and cluster if given).
"""

from export._src.adapting import adapt
from export._src.base import Exporter
from export._src.base import to_yaml
from export._src.common import require_int
from export._src.importing import Given
from export._src.importing import Imported
from export._src.importing import plan_settings
from export._src.imports import IMPORT_FRAMEWORKS
from export._src.imports import read_config
from export._src.imports import unexpressed
from export._src.planfile import PlanFile
from export._src.planfile import describe
from export._src.planfile import plan_from_dict
from export._src.planfile import plan_to_dict
from export._src.planfile import read_plan
from export._src.planfile import write_plan
from export._src.record import EngineDefaults
from export._src.record import Record
from export._src.record import SearchRules
from export._src.registry import ENGINE_DEFAULTS
from export._src.registry import FRAMEWORKS
from export._src.registry import PINS
from export._src.registry import RECORDS
from export._src.registry import get
from export._src.registry import record
from export._src.speculative_keys import RUNS as SPECULATIVE_RUNS
from export._src.speculative_keys import framework_keys as speculative_keys
from export.areal.exporter import to_areal
from export.nemo_rl.exporter import to_nemo_rl
from export.openrlhf.exporter import openrlhf_command
from export.openrlhf.exporter import to_openrlhf
from export.slime.exporter import slime_command
from export.slime.exporter import to_slime
from export.verl.exporter import to_verl
from export.verl.exporter import verl_command

__all__ = (
    "SPECULATIVE_RUNS",
    "speculative_keys",
    "adapt",
    "ENGINE_DEFAULTS",
    "EngineDefaults",
    "FRAMEWORKS",
    "Exporter",
    "Given",
    "IMPORT_FRAMEWORKS",
    "Imported",
    "PINS",
    "PlanFile",
    "RECORDS",
    "Record",
    "SearchRules",
    "describe",
    "get",
    "openrlhf_command",
    "plan_from_dict",
    "plan_settings",
    "plan_to_dict",
    "read_config",
    "read_plan",
    "record",
    "require_int",
    "slime_command",
    "to_areal",
    "to_nemo_rl",
    "to_openrlhf",
    "to_slime",
    "to_verl",
    "to_yaml",
    "unexpressed",
    "verl_command",
    "write_plan",
)
