"""The search space: placement families and the layout variables inside each.

A *family* is a registered :class:`costmodel.Placement` (see
:func:`costmodel.placements`): it fixes the pools, which role sits on which,
the rollout pool, the execution mode and the jobs it applies to.

The family is *enumerated*, not relaxed: the search optimises inside each
family and compares the families' rounded plans exactly. Inside a family every
plan is a vector of values, one per :class:`Var`:

* ``pool.<name>``: GPUs of each pool (relaxed: one GPU plus a softmax share of
  the remaining GPUs; discrete: see :func:`build`: any count for a pool
  without a trained role, ``dp x 2^k`` with ``dp`` dividing the mini-batch for
  a training pool, and a framework's node rule);
* per role with its own layout (actor, critic, reward model): ``tp``, ``pp``,
  ``cp``, ``ep`` and the micro-batches ``mb_train`` and ``mb_infer`` (relaxed:
  log2 of the value; discrete: powers of two), and the categorical
  ``zero`` (1, or 3 for FSDP-style sharding, which needs tp = pp = ep = 1),
  ``recompute`` (0 none, 1 selective, 2 full) and ``offload`` (0, 1);
* the reference model runs the actor's inference layout (the frameworks give
  the reference the actor's parallel settings), with its own ``offload``;
* the engine: ``tp``, ``pp``, ``max_seqs`` (log2), ``memory_fraction``
  (relaxed: a sigmoid onto its range) and, for MoE models, the categorical
  ``ep`` (0: no expert parallelism, 1: experts sharded over the TP group);
  for MLA models the categorical ``dp_attention`` (0, 1: SGLang's and vLLM's
  data-parallel attention, the latent KV held once per GPU);
* per trained role of an MoE model, the categorical ``etp`` (0: expert-tensor
  parallelism 1, 1: equal to the role's TP; :attr:`SpaceOptions.etp`), present
  when the role has TP and EP options above 1;
* per trained role, the categorical ``vpp`` (interleaved pipeline chunks per
  GPU, :attr:`SpaceOptions.vpp`), present when some pipeline degree admits a
  value above 1 (``pp > 1`` with ``pp x vpp`` dividing the layers: the rule
  table's ``vpp_needs_pp`` and ``vpp_divides_layers``).

A role's training and inference phases share its degrees (both run on the same
workers with one sharding) and differ in micro-batch. Categorical variables are
fixed per start during the relaxed phase and enumerated at rounding.

The parts live in ``space_options`` (kinds, options, pool sizes),
``space_structure`` (value vector -> plan, constraint measures),
``space_validity`` (rule-table validity and repair) and ``space_relaxed``
(relaxed-variable transforms); this module joins them and builds a family.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import costmodel as cm
from costmodel import internal as cmi
import export
from search._src.space_options import CAT
from search._src.space_options import FAMILIES
from search._src.space_options import FRAC
from search._src.space_options import LAYOUT_ROLES
from search._src.space_options import LOG2
from search._src.space_options import POOL
from search._src.space_options import ROLLOUT_PRECISIONS
from search._src.space_options import TRAINED_ROLES
from search._src.space_options import SpaceOptions
from search._src.space_options import Var
from search._src.space_options import default_families
from search._src.space_options import has_fp8
from search._src.space_options import pool_sizes
from search._src.space_options import powers_of_two
from search._src.space_options import tp_options
from search._src.space_options import training_pool_sizes
from search._src.space_relaxed import FamilyRelaxed
from search._src.space_structure import Structure
from search._src.space_structure import dead_variables
from search._src.space_structure import layout_violation
from search._src.space_structure import memory_excess
from search._src.space_validity import FamilyValidity

__all__ = ("CAT", "FAMILIES", "FRAC", "LOG2", "POOL", "FamilySpace", "SpaceOptions", "Structure",
           "Var", "build", "default_families", "layout_violation", "memory_excess", "pool_sizes",
           "training_pool_sizes", "why_empty")


@dataclasses.dataclass(frozen=True, eq=False)
class FamilySpace(FamilyValidity, FamilyRelaxed):
  """A family's variables and options for one job and cluster.

  Attributes:
    structure: The :class:`Structure` jitted code specialises on.
    vars: The variables, in the order of a value vector.
    job: The job.
    cluster: The cluster.
  """

  structure: Structure
  vars: tuple[Var, ...]
  job: cm.RLJob
  cluster: cm.Cluster

  @property
  def family(self) -> str:
    return self.structure.family

  @property
  def names(self) -> tuple[str, ...]:
    return self.structure.names

  def index(self, name: str) -> int:
    return self.structure.index(name)

  def var(self, name: str) -> Var:
    return self.vars[self.index(name)]

  def to_plan(self, v) -> cm.Plan:
    return self.structure.to_plan(v)

  @property
  def size(self) -> int:
    """Number of value vectors before validity checks (may be huge)."""
    return math.prod(len(v.options) for v in self.vars)


def _vpp_options(model: cm.ModelSpec, pps, vpps) -> list[int]:
  """1 and the interleaving degrees of ``vpps`` that some pipeline degree of
  ``pps`` above 1 admits (the rule table's ``vpp_divides_layers``)."""
  p = np.asarray([x for x in pps if x > 1], np.float64)
  out = [1]
  for v in vpps:
    if v > 1 and len(p) and cmi.rule_mask("layout", cmi.layout_fields(
        model, p * v, 1.0, p, 1.0, 1.0, vpp=float(v)), ("interleave",),
        only=("vpp_divides_layers",)).any():
      out.append(int(v))
  return sorted(set(out))


def _pool_options(placement: cm.Placement, job: cm.RLJob, cluster: cm.Cluster,
                  opts: SpaceOptions, nodes: str) -> list[tuple[str, np.ndarray]]:
  """``(pool, sizes)`` of each pool of ``placement``: the whole cluster for one
  pool; else :func:`pool_sizes` leaving a GPU to each other pool. A pool with a
  trained role keeps the sizes whose data-parallel degree can divide the
  mini-batch (:func:`training_pool_sizes`), the one pool of a single-pool family too."""
  n = cluster.n_gpus
  pools = placement.pools
  roles = cmi.required_roles(job)
  sizes = np.asarray([float(n)]) if len(pools) == 1 else pool_sizes(cluster, nodes)
  sizes = sizes[sizes <= n - (len(pools) - 1)]
  max_model = (min(opts.max_tp or cluster.scaleup_domain, n) * min(opts.max_pp, n)
               * min(opts.max_cp, n))
  out = []
  for p in pools:
    trains = any(placement.pool_of(r) == p for r in roles if r in TRAINED_ROLES)
    out.append((p, training_pool_sizes(sizes, mini_batch(job), max_model) if trains else sizes))
  return out


def mini_batch(job: cm.RLJob) -> float:
  """Samples per optimizer step: what a training pool's data-parallel degree divides."""
  return float(job.samples_per_step) / job.mini_batches


def why_empty(family: str, job: cm.RLJob, cluster: cm.Cluster,
              options: SpaceOptions | None = None, nodes: str = "any") -> str | None:
  """Why ``family`` holds no plan of ``job`` on ``cluster`` (None when its
  space is not empty by construction): the family needs a role the job lacks,
  the cluster has fewer GPUs than the family has pools, or a pool with a
  trained role has no size whose data-parallel degree divides the mini-batch
  (the ``batch`` rule set: ``size = dp x 2^k``, ``2^k`` up to the largest
  model-parallel degree, ``dp`` dividing the samples per optimizer step).

  Example: GRPO with 512 prompts x 8 samples colocated on 24 GPUs: 24 = 3 x 8
  and 3 does not divide 4,096, so no training layout exists.
  """
  placement = cm.placement(family)
  if not placement.applies_to(job):
    missing = [r for r in placement.requires if r not in cmi.required_roles(job)]
    return f"{family}: algorithm {job.algorithm!r} has no {' or '.join(missing)} to place"
  n = cluster.n_gpus
  if len(placement.pools) > n:
    return f"{family}: its {len(placement.pools)} pools need {len(placement.pools)} GPUs, the " \
           f"cluster has {n}"
  mb = mini_batch(job)
  what = "batch" if job.mini_batches == 1 else "mini-batch"
  for p, sizes in _pool_options(placement, job, cluster, options or SpaceOptions(), nodes):
    if len(sizes):
      continue
    where = (f"of {n} GPUs" if len(placement.pools) == 1 else
             f"for its {p} pool (up to {n - len(placement.pools) + 1} GPUs"
             f"{'' if nodes == 'any' else ', ' + nodes + ' nodes'})")
    return f"{family}: no training layout {where} divides the {mb:,.0f}-sample {what}"
  return None


def build(family: str, job: cm.RLJob, cluster: cm.Cluster,
          options: SpaceOptions | None = None, nodes: str = "any",
          ties: tuple[tuple[str, str], ...] = (),
          rule_sets: tuple[str, ...] = ("zero3", "batch"), runs_as: str = "any",
          rollout_precision: str = "bf16") -> FamilySpace | None:
  """The variables and options of ``family`` for ``job`` on ``cluster``.

  Pool sizes follow the rules that decide whether a pool runs: a pool without
  a trained role (the rollout pool, a reward model's) holds any number of
  GPUs (its engines' tensor x pipeline degree must divide it, checked per
  plan); a pool with a trained role holds ``dp x m`` GPUs, ``m`` a power of
  two, with ``dp`` dividing the mini-batch (the ``batch`` rule set); ``nodes``
  adds how a framework lays pools on nodes (:func:`pool_sizes`).

  Args:
    family: A registered placement family.
    job: The job.
    cluster: The cluster.
    options: The discrete options of each variable (defaults if None).
    nodes: How pools sit on nodes: ``any``, ``uniform`` or ``whole``.
    ties: ``(name, source)`` pairs of variables tied together (see
      :class:`Structure`); pairs naming a variable the job lacks are dropped.
    rule_sets: Optional rule sets of the rule table the layouts obey.
    runs_as: ``any`` or the framework (:data:`export.FRAMEWORKS`) whose forced
      settings every plan of the space gets (see :class:`Structure`); a variable
      they override (every option the same plan, e.g. veRL's FSDP reference
      ``offload``, slime's critic ``offload``) keeps its effective option only
      (:func:`~search._src.space_structure.dead_variables`).
    rollout_precision: The rollout engine's format (``bf16``, or ``fp8`` on an
      accelerator with an FP8 peak); one format per space.

  Returns:
    A :class:`FamilySpace`, or None when the family cannot hold the job on
    this cluster (:func:`why_empty` says why).

  Raises:
    ValueError: for an unknown family, framework or rollout format, or FP8
      rollout on an accelerator without an FP8 peak.
  """
  if family not in FAMILIES:
    raise ValueError(f"family={family!r} is not one of {FAMILIES}")
  cmi.check_one_of("build", ("any",) + export.FRAMEWORKS, runs_as=runs_as)
  cmi.check_one_of("build", tuple(ROLLOUT_PRECISIONS), rollout_precision=rollout_precision)
  if rollout_precision != "bf16" and not has_fp8(cluster.accelerator):
    raise ValueError(f"build: {rollout_precision=} needs an FP8 peak; "
                     f"{cluster.accelerator.name} has none")
  opts = options if options is not None else SpaceOptions()
  if why_empty(family, job, cluster, opts, nodes) is not None:
    return None
  placement = cm.placement(family)
  roles = cmi.required_roles(job)
  n = cluster.n_gpus
  domain = cluster.scaleup_domain
  vars_ = [Var(f"pool.{p}", POOL, sizes) for p, sizes in _pool_options(placement, job, cluster,
                                                                         opts, nodes)]
  f64 = lambda xs: np.asarray(sorted(set(float(x) for x in xs)), dtype=np.float64)
  for role in LAYOUT_ROLES:
    if role not in roles:
      continue
    model = {"actor": job.actor, "critic": job.critic, "reward": job.reward_model}[role]
    tp_hi = min(opts.max_tp or domain, n)
    vars_.append(Var(f"{role}.tp", LOG2, f64(tp_options(model, tp_hi))))
    pps = powers_of_two(min(opts.max_pp, model.n_layers, n))
    vars_.append(Var(f"{role}.pp", LOG2, f64(pps)))
    vars_.append(Var(f"{role}.cp", LOG2, f64(powers_of_two(min(opts.max_cp, n)))))
    if model.is_moe:
      e = np.asarray(powers_of_two(min(opts.max_ep, model.n_experts, n)), dtype=np.float64)
      eps = e[cmi.rule_mask("layout", cmi.layout_fields(model, e, 1.0, 1.0, 1.0, e),
                           only=("ep_divides_experts",))]
    else:
      eps = [1]
    vars_.append(Var(f"{role}.ep", LOG2, f64(eps)))
    if role in TRAINED_ROLES:
      vars_.append(Var(f"{role}.mb_train", LOG2, f64(opts.micro_batches)))
    vars_.append(Var(f"{role}.mb_infer", LOG2, f64(opts.micro_batches)))
    vars_.append(Var(f"{role}.zero", CAT, f64(opts.zero_stages)))
    if role in TRAINED_ROLES:
      vars_.append(Var(f"{role}.recompute", CAT, f64(opts.recompute)))
      if model.is_moe and opts.etp != (0,) and max(eps) > 1 and tp_hi > 1:
        vars_.append(Var(f"{role}.etp", CAT, f64(opts.etp)))
      vpps = _vpp_options(model, pps, opts.vpp)
      if len(vpps) > 1:
        vars_.append(Var(f"{role}.vpp", CAT, f64(vpps)))
    vars_.append(Var(f"{role}.offload", CAT, f64(opts.offload)))
    if role == "actor" and "reference" in roles:
      vars_.append(Var("reference.offload", CAT, f64(opts.offload)))
  actor = job.actor
  etp_hi = min(opts.engine_max_tp or domain, n)
  etp = np.asarray(powers_of_two(etp_hi), dtype=np.float64)
  etp = etp[cmi.rule_mask("engine", cmi.engine_fields(actor, etp, etp, 1.0, 1.0),
                         only=("engine_tp_divides_heads",))]
  vars_.append(Var("engine.tp", LOG2, f64(etp)))
  vars_.append(Var("engine.pp", LOG2, f64(powers_of_two(min(opts.engine_max_pp,
                                                             actor.n_layers, n)))))
  vars_.append(Var("engine.ep", CAT, f64(opts.engine_ep if actor.is_moe else (0,))))
  if actor.is_mla and len(opts.engine_dp_attention) > 1:
    vars_.append(Var("engine.dp_attention", CAT, f64(opts.engine_dp_attention)))
  vars_.append(Var("engine.memory_fraction", FRAC, f64(opts.memory_fractions)))
  vars_.append(Var("engine.max_seqs", LOG2, f64(opts.max_seqs)))
  names = tuple(v.name for v in vars_)
  ties = tuple((a, b) for a, b in ties if a in names and b in names)
  tied = dict(ties)
  vars_ = [Var(v.name, v.kind, np.asarray([1.0])) if v.name in tied else v for v in vars_]
  rule_sets = tuple(rule_sets) + (() if "interleave" in rule_sets else ("interleave",))
  structure = Structure(family=family, roles=roles, names=names, ties=ties,
                        rule_sets=rule_sets, runs_as=runs_as,
                        rollout_precision=rollout_precision)
  # A variable the framework's forced settings override keeps its effective option.
  dead = dead_variables(structure, tuple(v.options for v in vars_))
  vars_ = [Var(v.name, v.kind, np.asarray([dead[v.name]])) if v.name in dead else v
           for v in vars_]
  return FamilySpace(structure=structure, vars=tuple(vars_), job=job, cluster=cluster)
