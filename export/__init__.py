"""Exports of a concrete plan to the frameworks that run it, and plan files.

One :class:`Exporter` per framework, keyed by name (:data:`FRAMEWORKS`:
veRL, OpenRLHF, NeMo-RL, slime, AReaL; :func:`get`); each names the framework
version its keys and flags were checked against. Only what a
framework's configuration can express is exported: anything else (a pool
that is not ``nnodes x n_gpus_per_node``, a parallel degree the backend
lacks, a role placed where the keys cannot put it, a staleness the recipe
cannot bound) raises ``ValueError`` naming the setting and why.

>>> import export
>>> verl = export.get("verl")
>>> overrides = verl.to_config(plan, job, cluster, strategy="megatron")  # doctest: +SKIP
>>> print(verl.render(overrides))  # doctest: +SKIP

Plan files read back: ``export.read_plan(path).plan`` is the plan that
``export.write_plan(path, plan)`` wrote (with its job and cluster if given).
"""

from export._src.areal import to_areal
from export._src.base import Exporter
from export._src.base import to_yaml
from export._src.common import require_int
from export._src.nemo_rl import to_nemo_rl
from export._src.openrlhf import openrlhf_command
from export._src.openrlhf import to_openrlhf
from export._src.planfile import PlanFile
from export._src.planfile import describe
from export._src.planfile import plan_from_dict
from export._src.planfile import plan_to_dict
from export._src.planfile import read_plan
from export._src.planfile import write_plan
from export._src.registry import FRAMEWORKS
from export._src.registry import get
from export._src.slime import slime_command
from export._src.slime import to_slime
from export._src.verl import to_verl
from export._src.verl import verl_command

__all__ = (
    "FRAMEWORKS",
    "Exporter",
    "PlanFile",
    "describe",
    "get",
    "openrlhf_command",
    "plan_from_dict",
    "plan_to_dict",
    "read_plan",
    "require_int",
    "slime_command",
    "to_areal",
    "to_nemo_rl",
    "to_openrlhf",
    "to_slime",
    "to_verl",
    "to_yaml",
    "verl_command",
    "write_plan",
)
