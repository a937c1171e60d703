"""An estimate's step time in the buckets the frameworks' own timers report.

NeMo-RL (NVIDIA-NeMo/RL@7ea279ab ``nemo_rl/algorithms/grpo.py``) logs
``timing/train/<name>`` per step; the asynchronous GRPO loop times
``total_step_time``, ``exposed_generation`` (the trainer waiting for
trajectories, including the pending generation drained before a refit),
``idle/buffer_starvation`` (inside it: the replay buffer holds too few
trajectories), ``reward_calculation``, ``policy_and_reference_logprobs``,
``policy_training``, ``weight_sync`` (the refit transfer) and
``idle/refit_bubble`` (from the drain before a refit to its end: the
generation engines wait); the synchronous loop times ``generation`` and the
refit as ``prepare_for_generation/total``. veRL logs ``timing_s/<stage>``
(:data:`costmodel._src.step.algorithms.VERL_LOG_STAGES`).

From an :class:`Estimate` (per-stage durations and per-pool idle time):

* ``policy_training``, ``policy_and_reference_logprobs``, ``weight_sync``,
  ``reward_calculation``: the durations of the estimate's stages of the same
  work (the logprob timer covers the old and the reference log-probs);
* ``total_step_time``: the step time;
* ``exposed_generation`` (async; ``generation`` when synchronous): the step
  time the trainer does not spend in its own timed stages, ``step - (training
  + logprobs + reward + weight sync)``, at least 0;
* ``idle/buffer_starvation``: the trainer pool's idle time per step (async,
  the rollout engines on their own pool; 0 otherwise);
* ``idle/refit_bubble``: the rollout pool's idle time per step (async,
  disaggregated; 0 otherwise).
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.step import algorithms
from costmodel._src.step.result import Estimate

FRAMEWORKS = ("nemo_rl", "verl")

_NEMO_STAGES = {
    "policy_training": (algorithms.ACTOR_UPDATE, algorithms.CRITIC_UPDATE),
    "policy_and_reference_logprobs": (algorithms.OLD_LOG_PROB, algorithms.REFERENCE),
    "weight_sync": (algorithms.WEIGHT_SYNC,),
    "reward_calculation": (algorithms.REWARD,),
}


def _stage_sum(est: Estimate, names) -> jnp.ndarray:
  idx = [i for i, n in enumerate(est.stage_names) if n in names]
  return jnp.sum(jnp.asarray(est.duration_s)[jnp.asarray(idx, int)]) if idx else jnp.zeros(())


def _pool_idle(est: Estimate, pool: str) -> jnp.ndarray:
  if pool not in est.pool_names:
    return jnp.zeros(())
  return jnp.asarray(est.pool_idle_s)[est.pool_names.index(pool)]


def nemo_rl_buckets(est: Estimate, rollout_pool: str = "gen", train_pool: str = "train",
                    asynchronous: bool | None = None) -> dict[str, jnp.ndarray]:
  """The estimate as NeMo-RL's ``timing/train/`` keys (without the prefix).

  Args:
    est: An estimate.
    rollout_pool, train_pool: The pool names of the rollout engines and of
      the trainer (those of a ``split`` plan by default).
    asynchronous: NeMo-RL's asynchronous loop (``exposed_generation``) or the
      synchronous one (``generation``); default: asynchronous when the
      estimate's mode overlaps generation with training.
  """
  if asynchronous is None:
    asynchronous = est.mode not in ("sync", "synchronous", "colocated")
  out = {name: _stage_sum(est, stages) for name, stages in _NEMO_STAGES.items()}
  step = jnp.asarray(est.step_time_s)
  timed = sum(out.values())
  exposed = jnp.maximum(step - timed, 0.0)
  out["total_step_time"] = step
  if asynchronous:
    out["exposed_generation"] = exposed
    out["idle/buffer_starvation"] = jnp.minimum(_pool_idle(est, train_pool), exposed)
    out["idle/refit_bubble"] = _pool_idle(est, rollout_pool)
  else:
    out["generation"] = exposed
  return out


def verl_buckets(est: Estimate) -> dict[str, jnp.ndarray]:
  """The estimate as veRL's ``timing_s/`` keys (the stages each one times)."""
  out = {}
  for key, stages in algorithms.VERL_LOG_STAGES.items():
    if stages:
      t = _stage_sum(est, stages)
      if any(n in est.stage_names for n in stages):
        out[f"timing_s/{key}"] = t
  out["timing_s/step"] = jnp.asarray(est.step_time_s)
  return out


def step_buckets(est: Estimate, framework: str, **kwargs) -> dict[str, jnp.ndarray]:
  """The estimate's step time in ``framework``'s timer names (``nemo_rl`` or ``verl``).

  Raises:
    ValueError: for another framework.
  """
  if framework == "nemo_rl":
    return nemo_rl_buckets(est, **kwargs)
  if framework == "verl":
    return verl_buckets(est)
  raise ValueError(f"step_buckets: framework={framework!r} is not one of {FRAMEWORKS}")
