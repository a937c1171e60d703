"""Generation of agentic multi-turn episodes (``RLJob.multi_turn``).

Turn t of T starts from the context ``c_t = prompt + t (response + obs)``
(the prompt, the earlier turns' outputs and observations). Each turn is one
generation round of :func:`generate.generate` at that context (the decode
rounds, the KV cache each running sequence holds, the length tail of one
turn), with its prefill replaced by what the turn really prefills:

* turn 0: the prompt (once per group with prefix caching);
* later turns with ``kv_reuse``: only the new observation, attending to the
  whole context (prefix caching across turns);
* later turns without it: the whole context again.

Between turns every episode calls its tool. Synchronously (``overlap_tools``
off) each turn is a batch: the round waits for the slowest call
(``tool_latency_s_max``) and for the environment's CPU work, ``env_cpu_s``
per call shared over ``cores`` cores: ``env_cpu_s x max(1, N / cores)`` for
N concurrent calls, so the environment saturates at ``cores / env_cpu_s``
calls per second. Asynchronously the engine decodes other episodes while one
waits; the stage takes the longest of the engine's busy time (the turns'
generation), the slowest episode's own chain (its decode depth, a mean call
per tool call plus one tail call) and the environment's CPU time
``N (T - 1) env_cpu_s / cores``. Waiting time is reported as the stage's
bubble (the GPUs idle).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src import xla_options
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import common
from costmodel._src.stages import generate as gen_lib


def trajectory_job(job: RLJob) -> RLJob:
  """The job as the scoring and training stages see it: one sequence per
  episode, ``prompt + (T - 1) obs`` of context and ``T`` turns of output."""
  mt = job.multi_turn
  return job.replace(prompt_len=job.prompt_len + mt.tool_calls * mt.observation_tokens,
                     response=ResponseLength(knots=job.response.knots * mt.turns),
                     multi_turn=None)


def turn_context(job: RLJob, t: int):
  """Context tokens at the start of turn ``t`` (0-based)."""
  mt = job.multi_turn
  return jnp.asarray(job.prompt_len, float) + t * (job.response.mean + mt.observation_tokens)


def _turn(model: ModelSpec, job: RLJob, engine: Engine, pool_gpus, cluster: Cluster,
          eff: Efficiency, tau, t, controller: bool) -> common.StageCost:
  """One turn's generation with the turn's own prefill; ``t`` may be traced
  (the turns are one vmapped program). ``controller``: the episodes go back
  through the controller after this turn (the last one)."""
  mt = job.multi_turn
  ctx = turn_context(job, t)
  job_t = job.replace(prompt_len=ctx, multi_turn=None)
  whole = engine.replace(prefix_caching=False)
  cost = gen_lib.generate(model, job_t, whole, pool_gpus, cluster, eff, tau,
                          controller=controller)
  n_r = job.generated_samples_per_step / (pool_gpus / (engine.tp * engine.pp))
  # generate() prefilled the whole context of every sample: take it out.
  old_pr, old_comm = gen_lib.prefill(model, job_t, whole, cluster, eff, n_r * ctx, ctx, tau)
  if mt.kv_reuse:
    later = jnp.asarray(mt.observation_tokens, float)
    later_span = 2.0 * ctx - later  # new tokens attend to ctx - obs / 2 keys on average
  else:
    later, later_span = ctx, ctx
  first = jnp.asarray(t) == 0  # turn 0 prefills the prompt; causal: mean keys = span / 2
  new = jnp.where(first, ctx / (job.samples_per_prompt if engine.prefix_caching else 1.0),
                  later)
  span = jnp.where(first, ctx, later_span)
  pr, comm = gen_lib.prefill(model, job_t, whole, cluster, eff, n_r * new, span, tau)
  n_seq = job.generated_samples_per_step
  old_flops = n_seq * ctx * model.forward_flops_per_token(0.5 * ctx)
  new_flops = n_seq * new * model.forward_flops_per_token(0.5 * span)
  flops = cost.flops - old_flops + new_flops
  prefill_s = pr.time_s + comm
  return common.make_cost(
      cost.compute_s - old_pr.compute_s + pr.compute_s,
      cost.memory_s - old_pr.memory_s + pr.memory_s,
      cost.comm_s - old_comm + comm, cost.bubble_s, cost.overhead_s,
      cost.work_gpu_s * flops / jnp.maximum(cost.flops, 1.0), cost.depth_s, flops,
      cost.memory, **dict(cost.extras, prefill_s=prefill_s,
                          steady_time_s=cost.extras["steady_time_s"]
                          - cost.extras["prefill_s"] + prefill_s))


def env_cores(job: RLJob, cluster: Cluster):
  """CPU cores the environment's tool calls share: the job's own, else the cluster's."""
  return jnp.asarray(job.multi_turn.env_cores or cluster.cpu_cores, float)


def env_call_s(job: RLJob, cluster: Cluster, tau=0.0):
  """CPU time of one tool call when every episode calls at once (processor
  sharing over the environment's cores)."""
  mt = job.multi_turn
  cores = env_cores(job, cluster)
  return mt.env_cpu_s * smooth.smax(1.0, job.generated_samples_per_step / cores, tau)


def _early_turns(model, job, engine, pool_gpus, cluster, eff, tau) -> common.StageCost:
  """Every turn but the last, batched over the turn index."""
  turns = jnp.arange(job.multi_turn.turns - 1)
  return jax.vmap(lambda t: _turn(model, job, engine, pool_gpus, cluster, eff, tau, t,
                                  False))(turns)


# Eagerly, each operation of the batched turns would compile on its own
# (about 200 of them, 10 s, the first time a process estimates a multi-turn
# job); one program compiled for compile time instead. The sign of a concrete
# ``tau`` stays known while tracing.
_early_turns_jit = jax.jit(_early_turns, static_argnames="tau",
                           compiler_options=xla_options.FAST_COMPILE)


def generate(model: ModelSpec, job: RLJob, engine: Engine, pool_gpus, cluster: Cluster,
             eff: Efficiency, tau=0.0, controller: bool = True) -> common.StageCost:
  """Cost of one step's multi-turn episodes on the rollout pool.

  ``extras`` are the last turn's (its KV cache is the largest) with
  ``tool_wait_s`` (GPU time lost to tools), ``gpu_busy_s`` (the turns'
  generation), ``turn_prefill_s`` (prefill summed over turns) and
  ``steady_time_s``, ``decode_s``, ``tail_share`` over all turns.
  """
  mt = job.multi_turn
  # One traced program for all turns but the last (vmapped over the turn
  # index), and the last on its own (it alone goes through the controller):
  # unrolling the turns would trace the generation model ``turns`` times.
  last = _turn(model, job, engine, pool_gpus, cluster, eff, tau, mt.turns - 1, controller)
  early = None
  if mt.turns > 1:
    args = (model, job, engine, pool_gpus, cluster, eff)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, tau)))
    if traced or np.ndim(tau):  # a traced estimate: part of its program
      early = _early_turns(*args, tau)
    else:  # an eager estimate: one compiled program, not one per batched operation
      early = _early_turns_jit(*args, float(tau))

  def over_turns(get):
    """Sum over turns in turn order of ``get(cost)``."""
    rows = get(early) if early is not None else ()
    return sum(rows[i] for i in range(mt.turns - 1)) + get(last)

  def total(f):
    return over_turns(lambda c: getattr(c, f))

  busy_s = total("time_s")
  calls = float(mt.tool_calls)
  if mt.overlap_tools:
    cores = env_cores(job, cluster)
    chain_s = (total("depth_s") + calls * (mt.tool_latency_s_mean + mt.env_cpu_s)
               + (mt.tool_latency_s_max - mt.tool_latency_s_mean) * (calls > 0))
    cpu_s = job.generated_samples_per_step * calls * mt.env_cpu_s / cores
    stage_s = smooth.smax(smooth.smax(busy_s, chain_s, tau), cpu_s, tau)
    wait_s = stage_s - busy_s
  else:
    wait_s = calls * (mt.tool_latency_s_max + env_call_s(job, cluster, tau))
  decode_s = over_turns(lambda c: c.extras["decode_s"])
  tail = over_turns(lambda c: c.extras["tail_share"] * c.extras["decode_s"])
  extras = dict(last.extras, tool_wait_s=wait_s, gpu_busy_s=busy_s,
                turn_prefill_s=over_turns(lambda c: c.extras["prefill_s"]), decode_s=decode_s,
                tail_share=tail / jnp.maximum(decode_s, 1e-9),
                steady_time_s=over_turns(lambda c: c.extras["steady_time_s"]) + wait_s)
  return common.make_cost(total("compute_s"), total("memory_s"), total("comm_s"),
                          total("bubble_s") + wait_s, total("overhead_s"), total("work_gpu_s"),
                          total("depth_s") + calls * mt.tool_latency_s_max, total("flops"),
                          last.memory, **extras)
