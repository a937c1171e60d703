"""Framework-aware search spaces: the plans a framework can run.

A :class:`Framework` restricts the layout space to what one framework's
configuration can express, as its record states it (``export/<name>/record.py``,
``SearchRules``) and its exporter (:mod:`export`) reads it:

* the placement families it runs (which pools, which asynchronous modes);
* its batch divisibility rules (optional sets of the rule table,
  :data:`costmodel.internal.RULE_SETS`);
* how its pools sit on nodes (``uniform``: ``nnodes x n_gpus_per_node`` Ray
  groups; ``whole``: whole nodes on a multi-node cluster);
* the parallelisms and settings it has (e.g. FSDP without TP/PP for veRL's
  default strategy, DeepSpeed without PP for OpenRLHF, no selective
  recompute where only full gradient checkpointing is switchable);
* the settings it gives several roles at once, as ties between variables
  (OpenRLHF applies one ``--ds.*`` setting to every model).

``any`` keeps every core rule and the framework-neutral batch rule (each
mini-batch splits over the training pool's data-parallel ranks) and drops the
framework-specific ones. Every plan of a framework's space is the plan as the
framework runs it (``Exporter.adapt``: its weight sync, where it keeps a role's
state, applied by ``Structure.to_plan``), so the relaxed search and the exact
ranking see what the framework runs; a variable those settings override (every option
the same plan: veRL's FSDP reference ``offload``, slime's reference and critic
``offload``) keeps its effective option only, found on probe plans
(:func:`search._src.space_structure.dead_variables`). The exporter stays the final
word: the search keeps only plans the chosen framework's exporter accepts
(:func:`export_error`). The baselines (:func:`search.random_search`,
:func:`search.simulated_annealing`, :func:`search.enumerate_plans`,
:func:`search.cut_dp`) take the same ``framework=`` and search the same space.
"""

from __future__ import annotations

import dataclasses

import costmodel as cm
from costmodel import internal as cmi
import export as export_lib
from search._src import space as space_lib


@dataclasses.dataclass(frozen=True)
class Framework:
  """What one framework can run.

  Attributes:
    name: ``any`` or an exporter's name (:data:`export.FRAMEWORKS`).
    families: Placement families it runs.
    critic_families: Placement families it runs for a job with a critic
      (None: ``families``).
    rule_sets: Optional rule sets of the rule table its layouts obey.
    nodes: How its pools sit on nodes (see :func:`search._src.space.pool_sizes`).
    options: :class:`~search.SpaceOptions` fields it fixes.
    ties: ``(variable, source)`` pairs it sets together.
    export_options: Keyword sets of its exporter's ``to_config`` tried in
      order (the first that accepts a plan exports it).
    note: Where the restrictions come from.
  """

  name: str
  families: tuple[str, ...]
  critic_families: tuple[str, ...] | None = None
  rule_sets: tuple[str, ...] = ("zero3", "batch")
  nodes: str = "any"
  options: tuple[tuple[str, object], ...] = ()
  ties: tuple[tuple[str, str], ...] = ()
  export_options: tuple[dict, ...] = ({},)
  note: str = ""

  def space_options(self, base: space_lib.SpaceOptions | None) -> space_lib.SpaceOptions:
    """``base`` (defaults if None) with this framework's fixed settings."""
    base = base if base is not None else space_lib.SpaceOptions()
    fixed = dict(self.options)
    out = {}
    for k, v in fixed.items():
      have = getattr(base, k)
      if isinstance(have, tuple):
        keep = tuple(x for x in have if x in v)
        out[k] = keep or tuple(v)
      else:
        out[k] = min(have, v) if have else v
    return dataclasses.replace(base, **out)

  def build(self, family: str, job: cm.RLJob, cluster: cm.Cluster,
            options: space_lib.SpaceOptions | None = None, rollout_precision: str = "bf16"
            ) -> space_lib.FamilySpace | None:
    """The space of ``family`` restricted to this framework, its plans as the
    framework runs them (None when the family cannot hold the job)."""
    return space_lib.build(family, job, cluster, self.space_options(options), nodes=self.nodes,
                           ties=self.ties, rule_sets=self.rule_sets, runs_as=self.name,
                           rollout_precision=rollout_precision)

  def why_empty(self, family: str, job: cm.RLJob, cluster: cm.Cluster,
                options: space_lib.SpaceOptions | None = None) -> str | None:
    """Why :meth:`build` of ``family`` holds no plan (None when it does)
    (:func:`search._src.space.why_empty` with this framework's options and node layout)."""
    return space_lib.why_empty(family, job, cluster, self.space_options(options), self.nodes)

  def rollout_precisions(self, options: space_lib.SpaceOptions | None,
                         cluster: cm.Cluster) -> tuple[str, ...]:
    """The rollout formats searched: those allowed (``options``) that this framework
    writes and, beyond BF16, only on an accelerator with an FP8 peak."""
    allowed = self.space_options(options).rollout_precision
    return tuple(p for p in allowed if p == "bf16" or space_lib.has_fp8(cluster.accelerator))


_ALL = tuple(p.name for p in cm.placements())

# "any", then each framework's own rules, as its record states them (export/<name>/record.py).
_REGISTRY = {"any": Framework("any", _ALL,
                              note="core rules and the framework-neutral batch rule"),
             **{name: Framework(name, **dataclasses.asdict(r.search))
                for name, r in export_lib.RECORDS.items()}}

NAMES = tuple(_REGISTRY)


def get(name: str) -> Framework:
  """The framework ``name`` (``any`` or one of :data:`export.FRAMEWORKS`).

  Raises:
    ValueError: for an unknown name.
  """
  cmi.check_one_of("", NAMES, framework=name)
  return _REGISTRY[name]


def export_error(name: str, plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> str | None:
  """None when framework ``name``'s exporter accepts ``plan`` with one of its
  option sets, else the first refusal's message."""
  fw = get(name)
  if fw.name == "any":
    return None
  exporter = export_lib.get(fw.name)
  first = None
  for kwargs in fw.export_options:
    try:
      exporter.to_config(exporter.adapt(plan, **kwargs), job, cluster, **kwargs)
      return None
    except ValueError as e:
      first = first or str(e)
  return first


def export_options(name: str, plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster
                   ) -> dict | None:
  """The first option set of framework ``name``'s exporter that accepts
  ``plan`` (None when none does)."""
  exporter = export_lib.get(name)
  for kwargs in get(name).export_options:
    try:
      exporter.to_config(exporter.adapt(plan, **kwargs), job, cluster, **kwargs)
      return dict(kwargs)
    except ValueError:
      continue
  return None


def accepting(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> tuple[str, ...]:
  """The exporters (:data:`export.FRAMEWORKS`) that accept ``plan``."""
  return tuple(n for n in export_lib.FRAMEWORKS if export_error(n, plan, job, cluster) is None)


def allowed_modes(max_staleness: int, partial_rollout: bool) -> tuple[cm.Mode, ...]:
  """The execution modes a user allows: staleness 0 to ``max_staleness``,
  partial rollouts only when ``partial_rollout`` (and staleness >= 1)."""
  out = []
  for k in range(int(max_staleness) + 1):
    out.append(cm.Mode(staleness=k))
    if partial_rollout and k >= 1:
      out.append(cm.Mode(staleness=k, partial_rollout=True))
  return tuple(out)


def families_for(job: cm.RLJob, framework: str, max_staleness: int = 0,
                 partial_rollout: bool = False) -> tuple[str, ...]:
  """Families that apply to ``job``, that ``framework`` runs and whose mode the
  user allows."""
  fw = get(framework)
  modes = allowed_modes(max_staleness, partial_rollout)
  runs = fw.families
  if fw.critic_families is not None and "critic" in cmi.required_roles(job):
    runs = fw.critic_families
  return tuple(p.name for p in cm.placements(job)
               if p.name in runs and any(p.allows(m) for m in modes))


def on_policy(family: str) -> bool:
  """Whether ``family`` runs synchronously on-policy (staleness 0)."""
  return cm.placement(family).allows(cm.Mode())
