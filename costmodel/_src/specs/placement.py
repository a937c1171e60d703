"""Placement families as data: which pools exist and which role sits on which.

A :class:`Placement` names its pools, the pool of every role, the pool of the
rollout engines, the execution modes it runs (staleness, partial rollouts) and
the roles a job must have for it to apply. :func:`build_plan` turns a
placement, pool sizes and layouts into a :class:`~costmodel.Plan`; the
``Plan.colocated`` and ``Plan.split`` constructors, the layout search and the
rules of thumb all read the registry below.

Registered placements (:func:`placements`):

* ``colocated``: every role and the engines on one pool of the whole cluster,
  synchronous (veRL's hybrid engine, DeepSpeed-Chat);
* ``split``: the engines on a rollout pool, every other role on one training
  pool, synchronous (OpenRLHF);
* ``split_async``: the same pools, staleness 1 (one-step-off-policy);
* ``split_async_partial``: staleness 1 with partial rollouts (fully
  asynchronous, the generation tail carried over);
* ``split3`` (jobs with a critic): a rollout pool, an actor + reference pool
  and a critic + reward-model pool, synchronous.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses

from costmodel._src import pytree
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.plan import ROLES
from costmodel._src.specs.plan import TRAINED_ROLES
from costmodel._src.specs.plan import Mode
from costmodel._src.specs.plan import Plan
from costmodel._src.specs.plan import Pool
from costmodel._src.specs.plan import RolePlan
from costmodel._src.specs.plan import required_roles


@dataclasses.dataclass(frozen=True)
class Placement:
  """A placement family: pools, role placement, rollout pool, modes, jobs.

  Attributes:
    name: The family's name (``colocated``, ``split``, ...).
    pools: Names of its pools, in plan order.
    role_pools: ``(role, pool)`` for every role of :data:`ROLES` (roles a job
      does not have are not placed).
    rollout_pool: The pool of the rollout engines.
    modes: Execution modes the family runs, the first its default (only
      ``staleness`` and ``partial_rollout`` tell modes apart here; the fusion
      flags are free).
    requires: Roles a job must have for the family to apply (``split3``
      needs a critic).
    description: One line on the family.
  """

  name: str
  pools: tuple[str, ...]
  role_pools: tuple[tuple[str, str], ...]
  rollout_pool: str
  modes: tuple[Mode, ...] = (Mode(),)
  requires: tuple[str, ...] = ()
  description: str = ""

  def __post_init__(self):
    where = f"Placement {self.name!r}"
    if not self.pools or len(set(self.pools)) != len(self.pools):
      raise ValueError(f"{where}: pools={self.pools!r} must be unique and non-empty")
    placed = dict(self.role_pools)
    if sorted(placed) != sorted(ROLES) or len(placed) != len(self.role_pools):
      raise ValueError(f"{where}: role_pools={self.role_pools!r} must place each of {ROLES} "
                       "once")
    for role, pool in self.role_pools:
      if pool not in self.pools:
        raise ValueError(f"{where}: role {role!r} on pool={pool!r}, not one of {self.pools}")
    pytree.check_one_of(where, self.pools, rollout_pool=self.rollout_pool)
    if not self.modes:
      raise ValueError(f"{where}: modes must be non-empty")
    for role in self.requires:
      if role not in ROLES:
        raise ValueError(f"{where}: requires={self.requires!r}: {role!r} is not one of {ROLES}")

  @property
  def mode(self) -> Mode:
    """The default execution mode."""
    return self.modes[0]

  def pool_of(self, role: str) -> str:
    """The pool ``role`` sits on."""
    pytree.check_one_of(f"Placement {self.name!r}", ROLES, role=role)
    return dict(self.role_pools)[role]

  def allows(self, mode: Mode) -> bool:
    """Whether the family runs ``mode`` (its staleness and partial rollouts)."""
    return any(m.staleness == mode.staleness and m.partial_rollout == mode.partial_rollout
               for m in self.modes)

  def applies_to(self, job: RLJob) -> bool:
    """Whether ``job`` has every role the family requires."""
    roles = required_roles(job)
    return all(r in roles for r in self.requires)

  def check_job(self, job: RLJob) -> None:
    """Raises a ValueError naming the family when it does not apply to ``job``."""
    roles = required_roles(job)
    for r in self.requires:
      if r not in roles:
        raise ValueError(f"placement={self.name!r} needs a {r} role; algorithm="
                         f"{job.algorithm!r} has roles {roles}")

  def plan(self, pool_gpus: Mapping[str, float], roles: Sequence[str], engine: Engine,
           train: Mapping[str, Parallel | None] | None = None,
           infer: Mapping[str, Parallel | None] | None = None,
           mode: Mode | None = None) -> Plan:
    """The plan of ``roles`` on this family's pools (traceable: sizes and
    layouts may be jax values).

    Args:
      pool_gpus: GPUs of each of :attr:`pools`.
      roles: Roles to place, in plan order.
      engine: The rollout engines.
      train: Training layout of each trained role (actor, critic).
      infer: Inference layout of each role (None or missing: the role's
        training layout).
      mode: Execution mode (default :attr:`mode`); taken as given,
        :func:`~costmodel.validate_plan` checks the pools can run it.

    Raises:
      ValueError: when ``pool_gpus`` does not name exactly the family's pools.
    """
    if sorted(pool_gpus) != sorted(self.pools):
      raise ValueError(f"placement={self.name!r}: pool_gpus names {sorted(pool_gpus)}, must "
                       f"name its pools {list(self.pools)}")
    train = train or {}
    infer = infer or {}
    role_plans = tuple(
        RolePlan(r, self.pool_of(r), train=train.get(r) if r in TRAINED_ROLES else None,
                 infer=infer.get(r))
        for r in roles)
    return Plan(pools=tuple(Pool(p, pool_gpus[p]) for p in self.pools), roles=role_plans,
                engine=engine, rollout_pool=self.rollout_pool,
                mode=mode if mode is not None else self.mode)


def _everyone_on(pool: str, **others: str) -> tuple[tuple[str, str], ...]:
  return tuple((r, others.get(r, pool)) for r in ROLES)


_REGISTRY: dict[str, Placement] = {p.name: p for p in (
    Placement("colocated", ("all",), _everyone_on("all"), "all",
              description="every role and the engines on one pool, synchronous"),
    Placement("split", ("gen", "train"), _everyone_on("train"), "gen",
              description="engines on a rollout pool, the other roles on a training pool, "
              "synchronous"),
    Placement("split_async", ("gen", "train"), _everyone_on("train"), "gen",
              modes=(Mode(staleness=1),),
              description="split pools, one-step-off-policy (staleness 1)"),
    Placement("split_async_partial", ("gen", "train"), _everyone_on("train"), "gen",
              modes=(Mode(staleness=1, partial_rollout=True),),
              description="split pools, fully asynchronous with partial rollouts"),
    Placement("split3", ("gen", "actor", "critic"),
              _everyone_on("critic", actor="actor", reference="actor"), "gen",
              requires=("critic",),
              description="rollout, actor + reference and critic + reward pools, synchronous"),
)}


def placement(name: str) -> Placement:
  """The registered placement family ``name``.

  Raises:
    ValueError: for an unknown name.
  """
  pytree.check_one_of("", _REGISTRY, placement=name)
  return _REGISTRY[name]


def placements(job: RLJob | None = None) -> tuple[Placement, ...]:
  """Every registered placement family, or those that apply to ``job``."""
  return tuple(p for p in _REGISTRY.values() if job is None or p.applies_to(job))


def build_plan(family: Placement | str, job: RLJob, pool_gpus: Mapping[str, float],
               engine: Engine | None = None, train: Mapping[str, Parallel | None] | None = None,
               infer: Mapping[str, Parallel | None] | None = None,
               mode: Mode | None = None) -> Plan:
  """A plan of ``job``'s roles on a placement family's pools.

  Layouts not given (or None) default as the frameworks do: the actor trains
  with ``Parallel()``, the critic with the actor's training layout; the actor
  and critic infer with their training layouts, the reference and reward
  model with the actor's inference layout (else its training layout).

  Args:
    family: A :class:`Placement` or the name of a registered one.
    job: The RL job (its algorithm decides the roles placed).
    pool_gpus: GPUs of each of the family's pools.
    engine: The rollout engines (defaults if None).
    train: Training layouts of the actor and critic.
    infer: Inference layouts by role.
    mode: Execution mode (default: the family's).

  Raises:
    ValueError: for an unknown family, a family that does not apply to the
      job (``split3`` without a critic), or pool sizes that do not name the
      family's pools.

  Example:
    >>> import costmodel as cm
    >>> job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"))
    >>> plan = cm.build_plan("split", job, {"gen": 4.0, "train": 4.0},
    ...                      train={"actor": cm.Parallel(tp=2.0)})
    >>> plan.rollout_pool
    'gen'
  """
  p = placement(family) if isinstance(family, str) else family
  p.check_job(job)
  given = lambda m: {k: v for k, v in (m or {}).items() if v is not None}
  train, infer = given(train), given(infer)
  actor_train = train.get("actor", Parallel())
  actor_infer = infer.get("actor", actor_train)
  train = {r: train.get(r, actor_train) for r in TRAINED_ROLES}
  infer = {r: infer.get(r, None if r in TRAINED_ROLES else actor_infer) for r in ROLES}
  return p.plan(pool_gpus, required_roles(job), engine if engine is not None else Engine(),
                train=train, infer=infer, mode=mode)
