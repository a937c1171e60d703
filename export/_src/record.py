"""One record per framework: what the rest of the code asks about it.

Each framework is one folder, ``export/<name>/``: ``record.py`` (its pin, the
engine defaults the rules of thumb and its importer use, the rules its search
space follows, its command-line names), ``exporter.py``, ``importer.py``, and
``__init__.py`` assembling them into a :class:`Record`. The registry
(:mod:`export._src.registry`) lists the records, one line each; the search
(``search/_src/frameworks.py``), the command lines and the rules of thumb read
them, so adding a framework is one folder and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import re
from types import ModuleType
from typing import Any

import costmodel as cm
from export._src.base import Exporter


@dataclasses.dataclass(frozen=True)
class EngineDefaults:
  """A framework's rollout engine as it runs when its config says nothing."""

  tp: float
  memory_fraction: float
  max_seqs: float


@dataclasses.dataclass(frozen=True)
class SearchRules:
  """What a framework can run, as the search's space restricts it.

  Attributes:
    families: Placement families it runs.
    critic_families: Placement families it runs for a job with a critic (None: ``families``).
    rule_sets: Optional rule sets of the rule table its layouts obey.
    nodes: How its pools sit on nodes (``uniform``, ``whole`` or ``any``).
    options: ``SpaceOptions`` fields it fixes, ``(field, value)`` pairs.
    ties: ``(variable, source)`` pairs it sets together.
    export_options: Keyword sets of its exporter's ``to_config`` tried in order.
    note: Where the restrictions come from.
  """

  families: tuple[str, ...]
  critic_families: tuple[str, ...] | None = None
  rule_sets: tuple[str, ...] = ("zero3", "batch")
  nodes: str = "any"
  options: tuple[tuple[str, object], ...] = ()
  ties: tuple[tuple[str, str], ...] = ()
  export_options: tuple[dict, ...] = ({},)
  note: str = ""


@dataclasses.dataclass(frozen=True)
class Record:
  """Everything about one framework.

  Attributes:
    name: Registry key, the folder's name and ``--from_<name>``.
    framework: The framework's name as its users write it.
    pin: ``repository@commit`` (or a tag with its commit) the keys follow.
    exporter: Its :class:`~export.Exporter`.
    importer: Its import module (``read(source, **missing)``, ``read_source``,
      ``UNEXPRESSED``).
    search: The rules its search space follows.
    from_help: The help of ``--from_<name>``: what a run to start from is.
    engine_defaults: Its rollout engine when the config says nothing (None: no
      rule of thumb or importer default uses one).
    run_options: ``plan -> options`` the command lines export a plan with.
    run_keeps: ``(current, new, run_settings, job) -> None``: rewrites two plans'
      settings (dicts, in place) into the keys an imported run keeps (None: as written).
  """

  name: str
  framework: str
  pin: str
  exporter: Exporter
  importer: ModuleType
  search: SearchRules
  from_help: str
  engine_defaults: EngineDefaults | None = None
  run_options: Callable[[cm.Plan], dict[str, Any]] = lambda plan: {}
  run_keeps: Callable[[dict, dict, dict, cm.RLJob], None] | None = None

  def __post_init__(self):
    if self.exporter.name != self.name or self.exporter.version != self.pin:
      raise ValueError(f"Record {self.name!r}: its exporter is {self.exporter.name!r} at "
                       f"{self.exporter.version!r}, not {self.name!r} at {self.pin!r}")

  @property
  def commit(self) -> str:
    """The pinned commit (``1dda039``)."""
    return re.findall(r"\b[0-9a-f]{7,40}\b", self.pin)[-1]


def tie(roles: tuple[str, ...], names: tuple[str, ...], source: str = "actor"
        ) -> tuple[tuple[str, str], ...]:
  """``(role.name, source.name)`` ties: one setting the framework gives several roles."""
  return tuple((f"{r}.{n}", f"{source}.{n}") for r in roles for n in names)


# Settings a role copies from the actor when a framework has one setting for both.
DEGREES = ("tp", "pp", "cp", "ep", "etp")
# Only full gradient checkpointing is switchable (no selective recompute).
NO_SELECTIVE = (("recompute", (0, 2)),)
# Interleaved pipelines: veRL's and AReaL's Megatron backends write them
# (virtual_pipeline_model_parallel_size, virtual_pipeline_parallel_size);
# NeMo-RL's megatron_cfg and slime's launch scripts have no such setting.
NO_VPP = (("vpp", (1,)),)
# DP-attention: SGLang's enable_dp_attention, which slime and AReaL write; veRL,
# OpenRLHF and NeMo-RL set no such engine flag.
NO_DP_ATTENTION = (("engine_dp_attention", (0,)),)
# Expert-tensor parallelism: Megatron's expert_tensor_parallel_size, which veRL's
# and NeMo-RL's Megatron backends and slime write; AReaL's backend string has no
# such dimension (alloc_mode.md: d, p, t, c, e), OpenRLHF's DeepSpeed no EP at all.
NO_ETP = (("etp", (0,)),)
# FP8 rollout weights: no exporter here writes a quantised engine checkpoint (slime and
# AReaL write SGLang's kv_cache_dtype only; export/_src/common.py kv_cache_dtype).
BF16_ROLLOUT = (("rollout_precision", ("bf16",)),)
