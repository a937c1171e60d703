"""A family's structure (what jitted code specialises on), the plan of a value
vector, and the constraint measures shared by the relaxed and the exact evaluation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import costmodel as cm
from costmodel import internal as cmi
import export
from search._src.space_options import LAYOUT_ROLES
from search._src.space_options import ROLLOUT_PRECISIONS
from search._src.space_options import TRAINED_ROLES


@dataclasses.dataclass(frozen=True)
class Structure:
  """What jitted code specialises on: the family, its roles and variable order.

  Attributes:
    family: The placement family.
    roles: The job's roles.
    names: Variable names, in the order of a value vector.
    ties: ``(name, source)`` pairs: ``name`` takes the value of ``source``
      (a framework that gives the critic the actor's degrees); the tied
      variable keeps a single fixed option and is never read.
    rule_sets: Optional rule sets of the rule table the layouts obey.
    runs_as: The framework whose forced settings every plan gets (its
      exporter's ``adapt``: weight sync, where it keeps a role's state), so
      the relaxed objective, the exact evaluator and rounding see the plan as
      the framework runs it (in its space every option set it exports with
      forces the same); ``any``: none.
    rollout_precision: The rollout engine's format (a key of
      :data:`~search._src.space_options.ROLLOUT_PRECISIONS`).
  """

  family: str
  roles: tuple[str, ...]
  names: tuple[str, ...]
  ties: tuple[tuple[str, str], ...] = ()
  rule_sets: tuple[str, ...] = ("zero3", "batch")
  runs_as: str = "any"
  rollout_precision: str = "bf16"

  @property
  def placement(self) -> cm.Placement:
    return cm.placement(self.family)

  @property
  def pools(self) -> tuple[str, ...]:
    return self.placement.pools

  @property
  def mode(self) -> cm.Mode:
    return self.placement.mode

  def index(self, name: str) -> int:
    """Column of ``name`` in a value vector (a tied name: its source's)."""
    return self.names.index(dict(self.ties).get(name, name))

  def value(self, v, name: str, default: float, xp=np):
    """Column ``name`` of ``v`` (at least ``default``, a float when ``v`` is
    numpy), or ``default`` when the space has no such variable."""
    if name not in self.names:
      return default
    x = v[self.index(name)]
    return float(max(x, default)) if xp is np else jnp.maximum(x, default)

  def to_plan(self, v) -> cm.Plan:
    """The plan of one value vector ``v`` (numpy: concrete; jax: traceable)."""
    concrete = isinstance(v, np.ndarray)
    get = (lambda n: float(v[self.index(n)])) if concrete else (lambda n: v[self.index(n)])
    xp = np if concrete else jnp
    pool_gpus = {p: get(f"pool.{p}") for p in self.pools}

    def layout(role: str, mb: str, offload_role: str | None = None, vpp=1.0) -> cm.Parallel:
      etp = expert_tp(self, role, get, xp)
      return cm.Parallel(tp=get(f"{role}.tp"), pp=get(f"{role}.pp"), cp=get(f"{role}.cp"),
                         ep=get(f"{role}.ep"), etp=float(etp) if concrete else etp,
                         micro_batch=get(f"{role}.{mb}"),
                         zero_stage=get(f"{role}.zero"),
                         recompute=get(f"{role}.recompute") if role in TRAINED_ROLES else 0.0,
                         offload=get(f"{offload_role or role}.offload"), vpp=vpp)

    # A trained role's inference runs its training model chunks (its vpp); an
    # unset vpp column (0) is plain 1F1B.
    vpp = {r: self.value(v, f"{r}.vpp", 1.0, xp) for r in TRAINED_ROLES}
    train = {r: layout(r, "mb_train", vpp=vpp[r]) for r in self.roles if r in TRAINED_ROLES}
    infer = {r: layout("actor", "mb_infer", "reference", vpp["actor"]) if r == "reference"
             else layout(r, "mb_infer", vpp=vpp.get(r, 1.0)) for r in self.roles}
    tp = get("engine.tp")
    ep_on = get("engine.ep")
    if concrete:
      ep = tp if ep_on > 0.5 else 1.0
    else:
      ep = jnp.where(ep_on > 0.5, tp, 1.0)
    engine = cm.Engine(tp=tp, pp=get("engine.pp"), ep=ep,
                       memory_fraction=get("engine.memory_fraction"),
                       max_seqs=get("engine.max_seqs"),
                       dp_attention=self.value(v, "engine.dp_attention", 0.0, xp),
                       precision=ROLLOUT_PRECISIONS[self.rollout_precision])
    plan = self.placement.plan(pool_gpus, self.roles, engine, train=train, infer=infer)
    return plan if self.runs_as == "any" else export.get(self.runs_as).adapt(plan)


def expert_tp(structure: Structure, role: str, get, xp=np):
  """Expert-tensor-parallel degree of ``role`` (``get(name)``: a value or a column):
  its TP where the ``{role}.etp`` variable is on and the role has expert
  parallelism, else 1 (without EP Megatron's experts follow TP whatever ETP is;
  :func:`costmodel._src.ops.layers.effective_etp`)."""
  if role not in TRAINED_ROLES or f"{role}.etp" not in structure.names:
    return xp.ones_like(get(f"{role}.tp"))
  return xp.where((get(f"{role}.etp") > 0.5) & (get(f"{role}.ep") > 1.0), get(f"{role}.tp"),
                  1.0)


def _plan_or_none(structure: Structure, row: np.ndarray) -> cm.Plan | None:
  try:
    return structure.to_plan(row)
  except ValueError:  # a probe row no plan has (e.g. vpp > 1 with pp = 1)
    return None


def _with(row: np.ndarray, j: int, value: float) -> np.ndarray:
  v = row.astype(np.float64)
  v[j] = value
  return v


def _is_dead(structure: Structure, rows, row_plans, j: int, opts) -> bool:
  """Whether on every row every option of column ``j`` that makes a plan makes the same
  one (and some row compares two); stops at the first difference."""
  compared = False
  for row, own in zip(rows, row_plans, strict=True):
    first = None
    for o in opts:
      plan = own if o == row[j] else _plan_or_none(structure, _with(row, j, o))
      if plan is None:
        continue
      if first is None:
        first = plan
      elif plan != first:
        return False
      else:
        compared = True
  return compared


def _leaf_diffs(a: cm.Plan, b: cm.Plan) -> int:
  return sum(int(np.any(np.asarray(x) != np.asarray(y)))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def dead_variables(structure: Structure, options: tuple[np.ndarray, ...], probes: int = 6,
                   seed: int = 0) -> dict[str, float]:
  """The variables whose options all give the same plan as ``structure.runs_as``
  runs it (its forced settings override them), each with its effective option.

  Derived on probes: the value vectors of the first options, the last options and
  ``probes`` random draws (seeded); a variable is dead when on every probe
  every option that makes a plan makes the same plan (and some probe compares
  two). Its effective option is the one the forced settings change least (the
  fewest plan fields differ before and after ``adapt`` on the first two probes; the
  first on a tie),
  e.g. veRL's FSDP reference ``offload`` 1.

  Args:
    structure: The family's structure (``any``: no forced settings, none dead).
    options: Each variable's options, in the order of ``structure.names``.
    probes: Random probe vectors besides the first and last options.
    seed: Seed of the random probes.

  Returns:
    ``{name: effective option}`` of the dead variables.
  """
  if structure.runs_as == "any":
    return {}
  raw = dataclasses.replace(structure, runs_as="any")
  rng = np.random.default_rng(seed)
  rows = [np.asarray([o[0] for o in options]), np.asarray([o[-1] for o in options])]
  rows += [np.asarray([rng.choice(o) for o in options]) for _ in range(probes)]
  row_plans = [_plan_or_none(structure, row) for row in rows]
  out = {}
  for j, (name, opts) in enumerate(zip(structure.names, options, strict=True)):
    if len(opts) >= 2 and _is_dead(structure, rows, row_plans, j, opts):
      cost = [sum(_leaf_diffs(p, raw.to_plan(v)) for row in rows[:2]
                  if (p := _plan_or_none(structure, v := _with(row, j, o))) is not None)
              for o in opts]
      out[name] = float(opts[int(np.argmin(cost))])
  return out


def _role_model(job: cm.RLJob, role: str) -> cm.ModelSpec:
  return {"actor": job.actor, "critic": job.critic, "reward": job.reward_model}[role]


def role_layout_fields(structure: Structure, job: cm.RLJob, role: str, get, gpus, xp,
                        phase: str | None = None) -> dict:
  """The rule table's ``layout`` fields of ``role`` (``get(name)``: a column of
  values, numpy or jax); a trained role carries its batch (the batch rules).

  ``phase`` None: the role's training layout if it is trained, else a layout
  without micro-batch; ``"train"`` or ``"infer"``: that phase's layout as the plan
  builds it (:meth:`Structure.to_plan`: the phase's micro-batch, the training
  chunks ``vpp`` in both, a column at 0 from rows built without the variable
  read as 1).
  """
  trained = role in TRAINED_ROLES if phase is None else phase == "train"
  samples = job.samples_per_step
  if xp is np:
    samples = float(samples)
  vpp = 1.0
  if f"{role}.vpp" in structure.names and (trained or phase is not None):
    vpp = get(f"{role}.vpp")
    vpp = np.maximum(vpp, 1.0) if xp is np else vpp
  mb = {None: "mb_train" if trained else None, "train": "mb_train", "infer": "mb_infer"}[phase]
  return cmi.layout_fields(_role_model(job, role), gpus,
                          *(get(f"{role}.{d}") for d in ("tp", "pp", "cp", "ep")),
                          zero=get(f"{role}.zero"), vpp=vpp,
                          etp=expert_tp(structure, role, get, xp),
                          micro_batch=get(f"{role}.{mb}") if mb else 1.0,
                          samples=samples, mini_batch_samples=samples / job.mini_batches,
                          trained=trained)


# ----- constraint measures shared by the relaxed and the exact evaluation -------


def memory_excess(structure: Structure, v: jax.Array, est: cm.Estimate, job: cm.RLJob,
                  cluster: cm.Cluster) -> jax.Array:
  """How far a plan is from fitting in memory, relative to the limits.

  The sum over stages of ``Estimate.memory_excess`` (each stage's
  ``relu_tau(need / limit - 1)``, the generation row with the engine's own
  budget): zero when the plan fits, smooth at tau > 0. ``structure``, ``v``,
  ``job`` and ``cluster`` are not needed; they stay for the callers.
  """
  del structure, v, job, cluster
  excess = est.memory_excess
  # Added stage by stage: XLA on CPU reduces a batch's short last axis slowly
  # (about 10% of the scoring of 16,384 rows of PPO's split3 family).
  return sum((excess[..., i] for i in range(1, excess.shape[-1])), excess[..., 0])


def layout_violation(structure: Structure, v: jax.Array, job: cm.RLJob, cluster_gpus,
                     tau: float = 1.0) -> jax.Array:
  """The rule table's penalty of (relaxed) values: its relaxed measures in log2
  units at ``tau > 0`` (e.g. ``relu(log2(tp pp cp) - log2(pool))`` per role,
  ``relu(log2 ep - log2(pool / pp))``, the engine's ``relu(log2(tp pp) -
  log2(rollout pool))``, ``relu(-log2 pool)``), its exact measures at ``tau = 0``.
  """
  get = lambda name: v[structure.index(name)]
  total = jnp.zeros((), v.dtype)
  for p in structure.pools:
    total = total + cmi.rule_penalty("pool", {"gpus": get(f"pool.{p}")}, tau, xp=jnp)
  pools_total = sum(get(f"pool.{p}") for p in structure.pools)
  total = total + cmi.rule_penalty("pools", {"total": pools_total,
                                            "cluster_gpus": cluster_gpus}, tau, xp=jnp)
  for role in LAYOUT_ROLES:
    if role not in structure.roles:
      continue
    gpus = get(f"pool.{structure.placement.pool_of(role)}")
    fields = role_layout_fields(structure, job, role, get, gpus, jnp)
    total = total + cmi.rule_penalty("layout", fields, tau, structure.rule_sets, xp=jnp)
  rollout = structure.placement.rollout_pool
  etp = get("engine.tp")
  fields = cmi.engine_fields(job.actor, get(f"pool.{rollout}"), etp, get("engine.pp"),
                            jnp.where(get("engine.ep") > 0.5, etp, 1.0))
  return total + cmi.rule_penalty("engine", fields, tau, xp=jnp)
