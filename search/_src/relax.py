"""Relaxed optimisation inside one family: many starts, one vmap, one program.

Each start is a vector ``x`` of relaxed parameters (log2 degrees, logits of
pool shares and of the memory fraction; categorical values held fixed). The
objective of one start is

    log(step_time(tau)) + w * (memory_excess + layout_violation)

with the smooth cost model (``tau > 0``). ``tau`` anneals geometrically from
``tau_start`` to ``tau_end`` and the penalty weight ``w`` grows geometrically
from ``weight_start`` to ``weight_end``, so early steps see a smooth landscape
and late steps the nearly exact one with binding constraints. Adam (optax)
with a cosine-decayed learning rate updates every start; after each update the
parameters are projected onto their box (``lo <= x <= hi``; categorical
entries have ``lo == hi``).

The gradient is taken by forward differences (``RelaxConfig.gradient =
"forward"``, the default): each step is one jitted forward program over every
start and its ``k`` neighbours along the ``k`` trainable variables, called once
per step; ``"central"`` takes the ``2k`` neighbours on both sides (second-order
accurate, twice the points). With ``"reverse"`` it is ``jax.grad`` of the
objective. Whatever the gradient, a step is one program that Python calls
``steps`` times (:func:`run`). Starts are a leading batch axis
(``vmap``), which can be sharded over devices
(:func:`search._src.sharding.shard_starts`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import costmodel as cm
from costmodel import internal as cmi
from search._src import compile_cache
from search._src import differences
from search._src import relaxed_objective as objective_lib
from search._src import sharding
from search._src import space as space_lib
from search._src import trace_cache


class RelaxConfig(NamedTuple):
  """Schedules of the relaxed phase (hashable: a static jit argument).

  Attributes:
    steps: Optimisation steps.
    learning_rate: Initial Adam learning rate (log2 units per step).
    final_lr_fraction: Final learning rate as a fraction of the initial one.
    tau_start, tau_end: Smoothing temperature at the first and last step.
    weight_start, weight_end: Penalty weight at the first and last step.
    feasible_tol: Penalty below which a relaxed point counts as feasible.
    gradient: ``"forward"``: forward differences of the relaxed objective,
      one forward program over ``k + 1`` points per start (``k`` trainable
      variables); ``"central"``: central differences, ``2k + 1`` points;
      ``"reverse"``: reverse-mode autodiff (``jax.grad``).
    fd_step: Step of the finite differences, in the relaxed parameters' units
      (log2 degrees, logits).

  100 steps, not more: on the benchmark's 24 enumerable problems (1.7-94 M
  plans) the search finds the exhaustive optimum with 100 steps as with 200
  (gap 0.00% on every one, ``benchmarks/results/search_steps.md``), and the
  loop is most of a warm search's time.
  """

  steps: int = 100
  learning_rate: float = 0.15
  final_lr_fraction: float = 0.1
  tau_start: float = 0.3
  tau_end: float = 0.02
  weight_start: float = 1.0
  weight_end: float = 100.0
  feasible_tol: float = 1e-3
  gradient: str = "forward"
  fd_step: float = 1e-2


GRADIENTS = ("forward", "central", "reverse")
# The gradients taken by finite differences: a loop of forward programs.
FINITE_DIFFERENCES = ("forward", "central")


class RelaxState(NamedTuple):
  """State of the relaxed optimisation of a batch of starts.

  Attributes:
    x: Relaxed parameters [starts, V].
    opt_state: optax state.
    step: Steps taken.
  """

  x: jax.Array
  opt_state: optax.OptState
  step: jax.Array


class RelaxInputs(NamedTuple):
  """Per-start arrays the objective needs besides ``x``."""

  lo: jax.Array
  hi: jax.Array


class RelaxOutput(NamedTuple):
  """Result of :func:`run`.

  Attributes:
    x: Final relaxed parameters [starts, V].
    values: Final relaxed values [starts, V] (degrees, pool GPUs, ...).
    step_time_s: Relaxed step time of each start at the final tau.
    penalty: Constraint penalty of each start (memory + layout).
    history_s: Best relaxed step time over nearly feasible starts at each
      step [steps] (inf where none is; [steps, F] for a space of F families).
  """

  x: np.ndarray
  values: np.ndarray
  step_time_s: np.ndarray
  penalty: np.ndarray
  history_s: np.ndarray


def _schedule(cfg: RelaxConfig, t, start, end):
  frac = t / max(cfg.steps - 1, 1)
  return start * (end / start) ** frac


def _objective(fs_static, job, cluster, eff, x, tau, weight):
  structure, fs = fs_static
  # A space may bring its own objective (same signature and outputs), e.g.
  # :mod:`search._src.sizing_relax`, whose ``job`` argument is its problem.
  if hasattr(fs, "relaxed_objective"):
    return fs.relaxed_objective(job, cluster, eff, x, tau, weight)
  v = fs.relaxed_values(x, cluster.n_gpus)
  plan = structure.to_plan(v)
  with cmi.positive_tau():  # tau > 0 throughout: trace the smooth model only
    est = cm.estimate(job, plan, cluster, eff, tau=tau)
  step, penalty = est.step_time_s, objective_lib.penalty_of(structure, v, est, job, cluster)
  return objective_lib.loss_of(step, penalty, weight), (step, penalty)


def _optimizer(cfg: RelaxConfig) -> optax.GradientTransformation:
  lr = optax.cosine_decay_schedule(cfg.learning_rate, max(cfg.steps, 1),
                                   alpha=cfg.final_lr_fraction)
  return optax.adam(lr)


def init(cfg: RelaxConfig, x0: jax.Array) -> RelaxState:
  """Initial state for starts ``x0`` [starts, V]."""
  opt = _optimizer(cfg)
  return RelaxState(x=x0, opt_state=jax.vmap(opt.init)(x0), step=jnp.zeros((), jnp.int32))


def update(fs_static, cfg: RelaxConfig, job, cluster, eff, inputs: RelaxInputs,
           state: RelaxState):
  """One Adam step of every start; returns the new state and per-start
  (step time, penalty) before the step."""
  opt = _optimizer(cfg)
  t = state.step.astype(jnp.float32)
  tau = _schedule(cfg, t, cfg.tau_start, cfg.tau_end)
  weight = _schedule(cfg, t, cfg.weight_start, cfg.weight_end)
  objective = lambda x: _objective(fs_static, job, cluster, eff, x, tau, weight)
  columns = objective_lib.trainable(fs_static[1])
  if cfg.gradient == "reverse":
    (_, (step, penalty)), grads = jax.vmap(jax.value_and_grad(objective, has_aux=True))(state.x)
    mask = np.zeros(state.x.shape[-1], np.float32)
    mask[list(columns)] = 1.0
    grads = grads * mask
  else:  # zero outside ``columns`` already
    _, (step, penalty), grads = differences.finite_differences(
        objective, state.x, columns, cfg.fd_step, central=cfg.gradient == "central")
  grads = jnp.where(jnp.isfinite(grads), grads, 0.0)
  updates, opt_state = jax.vmap(opt.update)(grads, state.opt_state, state.x)
  x = jnp.clip(optax.apply_updates(state.x, updates), inputs.lo, inputs.hi)
  return RelaxState(x=x, opt_state=opt_state, step=state.step + 1), (step, penalty)


class Static:
  """Hashable wrapper: jit specialises on the family structure only."""

  def __init__(self, fs: space_lib.FamilySpace):
    self.fs = fs
    self.key = objective_lib.static_key(fs)

  def __hash__(self):
    return hash(self.key)

  def __eq__(self, other):
    return isinstance(other, Static) and self.key == other.key


# The relaxed loop runs a few hundred cheap steps, so XLA's backend
# optimisation buys little run time but costs most of the compile time of the
# (large) gradient graph (:data:`~search._src.compile_cache.FAST_COMPILE`).
# The objective is traced inside :func:`costmodel.internal.positive_tau` (the annealed
# tau stays positive), so the smooth operations trace only their surrogates:
# no exact branch whose gradient the select would discard, half the graph to
# compile. ``update`` still zeroes non-finite gradient entries as a guard, and
# :func:`objective_and_grad` (the same options) shows the gradient itself is
# finite.
_FAST_COMPILE = compile_cache.FAST_COMPILE


def _best(step, penalty, cfg, fs=None, x=None):
  """The best step time among the nearly feasible starts (inf where none is);
  for a space of several families (``fs.family_of``, :mod:`search._src.shared`)
  one per family [F]."""
  ok = penalty <= cfg.feasible_tol
  t = jnp.where(ok & jnp.isfinite(step), step, jnp.inf)
  if not hasattr(fs, "family_of"):
    return jnp.min(t)
  fam = jax.vmap(fs.family_of)(x)
  own = fam[None, :] == jnp.arange(len(fs.spaces), dtype=fam.dtype)[:, None]
  return jnp.min(jnp.where(own, t[None, :], jnp.inf), axis=1)


# A step is a program that Python calls ``steps`` times: a scan of the steps
# doubled the compilation, of the finite-difference step and of the gradient
# graph alike. The reverse-mode step compiles the gradient graph: large, run
# on the starts alone, so at level 0. The finite-difference step compiles the
# forward graph but runs it on k + 1 (central: 2k + 1) points per start.
# Level 1 halves a step's run time and costs more to compile, so a loop of few
# point evaluations per device compiles at level 0. Forward
# differences, 16 starts a family: at 19,200 points a core (DeepSeek-V3 on
# 16,384 GPUs) level 1 saves about 0.75 s a run for about 0.5 s more
# compilation, and the saving scales with the points, so level 0 pays below
# about 13,000.
SMALL_LOOP_POINTS = 13_000


def _step_of(static, cfg, job, cluster, eff, inputs, state):
  """One step of the loop: the new state, the point it evaluated, that
  point's step time, penalty and relaxed values, and the best nearly feasible
  step time among the starts."""
  fs_static = (static.fs.structure, static.fs)
  new_state, (step, penalty) = update(fs_static, cfg, job, cluster, eff, inputs, state)
  values = jax.vmap(lambda x: static.fs.relaxed_values(x, cluster.n_gpus))(state.x)
  return (new_state, state.x, values, step, penalty,
          _best(step, penalty, cfg, static.fs, state.x))


# The step's two jitted definitions (by XLA options); their compiled programs
# are kept in search._src.program_cache through trace_cache.compiled.
_STEP_PROGRAMS = {
    small: (jax.jit(_step_of, static_argnames=("static", "cfg"), compiler_options=opts),
            opts)
    for small, opts in ((True, compile_cache.FAST_COMPILE), (False, compile_cache.FORWARD))}


def small_loop(fs, cfg: RelaxConfig, rows_per_device: int) -> bool:
  """Whether a loop compiles at level 0: a reverse-mode loop always, a
  finite-difference loop that makes at most :data:`SMALL_LOOP_POINTS`
  evaluations a device."""
  if cfg.gradient == "reverse":
    return True
  points = differences.points_per_start(len(objective_lib.trainable(fs)),
                                         central=cfg.gradient == "central")
  return rows_per_device * points * cfg.steps <= SMALL_LOOP_POINTS


def step_program(fs, cfg: RelaxConfig, rows_per_device: int):
  """The jitted step for ``rows_per_device`` starts a device, and its XLA
  options (level 0 for a :func:`small_loop`)."""
  return _STEP_PROGRAMS[small_loop(fs, cfg, rows_per_device)]


@functools.partial(jax.jit, static_argnames=("static",), compiler_options=_FAST_COMPILE)
def _value_and_grad(static, job, cluster, eff, x, tau, weight):
  fs_static = (static.fs.structure, static.fs)
  f = lambda xx, t: _objective(fs_static, job, cluster, eff, xx, t, weight)
  (loss, (step, penalty)), grad = jax.vmap(jax.value_and_grad(f, has_aux=True))(x, tau)
  return loss, step, penalty, grad


def objective_and_grad(fs: space_lib.FamilySpace, eff: cm.Efficiency, x: np.ndarray,
                       tau: np.ndarray, weight: float = 1.0):
  """The relaxed objective of a batch of parameter vectors and its gradient.

  Args:
    fs: The family space (its job and cluster are used).
    eff: Efficiency parameters.
    x: [n, V] relaxed parameters.
    tau: [n] smoothing temperatures (> 0).
    weight: Penalty weight.

  Returns:
    numpy ``(objective [n], step_time_s [n], penalty [n], grad [n, V])``.
  """
  out = _value_and_grad(Static(fs), fs.job, fs.cluster, eff, jnp.asarray(x, jnp.float32),
                        jnp.asarray(tau, jnp.float32), jnp.float32(weight))
  return tuple(np.asarray(a) for a in out)


def run(fs: space_lib.FamilySpace, job: cm.RLJob, cluster: cm.Cluster, eff: cm.Efficiency,
        x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, cfg: RelaxConfig,
        on_traced=None) -> RelaxOutput:
  """Optimises the starts ``x0`` [starts, V] with bounds ``lo``/``hi``.

  ``on_traced``, when given, is called once the loop is traced, before XLA
  compiles it (:func:`search._src.trace_cache.call`).

  The batch is padded to a multiple of the device count with copies of its
  last start (which changes no result) and sharded over the devices.
  """
  s = x0.shape[0]
  pad = sharding.pad_starts(s) - s
  if pad:
    rep = lambda a: np.concatenate([a, np.repeat(a[-1:], pad, 0)], 0)
    x0, lo, hi = rep(x0), rep(lo), rep(hi)
  if cfg.gradient not in GRADIENTS:
    raise ValueError(f"RelaxConfig: gradient={cfg.gradient!r} is not one of {GRADIENTS}")
  if not cfg.fd_step > 0:
    raise ValueError(f"RelaxConfig: fd_step={cfg.fd_step!r} must be > 0")
  x0, lo, hi = (np.asarray(a, np.float32) for a in (x0, lo, hi))
  x0s, los, his = sharding.shard_starts(x0, lo, hi)
  out = _loop(Static(fs), cfg, job, cluster, eff, x0s, los, his, on_traced)
  x, values, step, penalty, history = (np.asarray(a) for a in out)
  return RelaxOutput(x=x[:s], values=values[:s], step_time_s=step[:s], penalty=penalty[:s],
                     history_s=history)


def _loop(static, cfg, job, cluster, eff, x0, lo, hi, on_traced):
  """The loop: the step program called ``cfg.steps`` times
  (its arrays stay on the devices; one transfer at the end)."""
  state = init(cfg, x0)
  if jax.device_count() == 1:
    # Committed to the device as the step's outputs are, so every call has the
    # first one's signature (a program served from disk recompiles otherwise).
    state = jax.device_put(state, jax.devices()[0])
  inputs = RelaxInputs(lo=lo, hi=hi)
  args = (job, cluster, eff, inputs, state)
  program, options = step_program(static.fs, cfg, -(-x0.shape[0] // jax.device_count()))
  step_fn = trace_cache.compiled("relax_step", program, (static, cfg),
                                 (static.key, cfg), args, options, on_traced=on_traced)
  history = []
  for _ in range(cfg.steps):
    state, x, values, step, penalty, best = step_fn(job, cluster, eff, inputs, state)
    history.append(best)
  # One transfer of the bests (stacked on the device: a program of `steps` operands).
  return x, values, step, penalty, np.stack(jax.device_get(history))
