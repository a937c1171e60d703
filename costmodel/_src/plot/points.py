"""Points for the roofline figure: arithmetic intensity and modelled FLOP/s.

:func:`roofline_points` reads the cost model (no matplotlib) and returns the
``(label, intensity_flops_per_byte, achieved_flops_per_s)`` triples that
:func:`costmodel.plot.roofline` draws.
"""

from __future__ import annotations

import numpy as np

from costmodel._src.ops import layers
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import plan as plan_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.stages import common
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import registry
from costmodel._src.step import algorithms


def _running_context(job: RLJob):
  """Mean context of a running sequence (length-biased), as generation uses."""
  knots = np.asarray(job.response.knots, float)
  return float(job.prompt_len) + 0.5 * np.mean(knots**2) / np.mean(knots)


def roofline_points(job: RLJob, plan: plan_lib.Plan, cluster: Cluster,
                    efficiency: Efficiency | None = None) -> list[tuple[str, float, float]]:
  """Arithmetic intensity and modelled FLOP/s of the main stages, per GPU.

  * ``generate (decode)``: one decode round at the engine's peak
    concurrency B (``Estimate.gen_concurrency``): FLOPs ``2 * active params *
    B / tp`` plus attention over the running context; bytes: the engine's
    weight shard, the KV cache of the B running sequences and the element-wise
    traffic. Time: the model's decode round (roofline + TP all-reduces + the
    engine's per-step overhead).
  * inference stages (``reference``, ``old_log_prob``, ``values``,
    ``reward``): the forward pass of one micro-batch (FLOPs and bytes of
    :func:`layers.forward_work`), timed by :func:`common.pass_time`.
  * training stages (``actor_update``, ``critic_update``): forward and
    backward of one micro-batch (3x the forward, 4x with full recompute:
    hardware FLOPs), timed likewise; pipeline bubble and optimizer step left
    out.

  The rule-based reward, the switch and the weight sync do no FLOPs worth
  plotting and are skipped. Achieved = FLOPs / modelled time, so communication
  and overheads pull a point below the roof.

  Args:
    job: The RL job.
    plan: A concrete plan (validated).
    cluster: The cluster.
    efficiency: Efficiency parameters (defaults if None).

  Returns:
    A list of ``(label, intensity_flops_per_byte, achieved_flops_per_s)``,
    ready for :func:`roofline`.

  Raises:
    ValueError: for an invalid plan (see :func:`costmodel.validate_plan`).
  """
  from costmodel._src.step import estimate as step_lib  # pylint: disable=g-import-not-at-top
  eff = efficiency if efficiency is not None else Efficiency()
  est = step_lib.estimate(job, plan, cluster, eff)
  gpus = {p.name: float(p.gpus) for p in plan.pools}
  out = []
  # Decode round at peak concurrency (as in generate.decode_round).
  e = plan.engine
  conc, ctx = float(est.gen_concurrency), _running_context(job)
  mb = conc / float(e.pp)
  w = layers.forward_work(job.actor, mb, ctx, tp=e.tp, pp=e.pp, ep=e.ep,
                          param_bytes=job.param_bytes, lm_head=True)
  kv = mb * ctx * gen_lib.kv_bytes_per_token_per_gpu(job.actor, e, job.kv_bytes)
  flops = float(e.pp) * float(w.matmul_flops + w.attention_flops)
  nbytes = float(e.pp) * float(w.weight_bytes + kv + w.activation_bytes)
  devices = registry.pool_devices(plan, cluster)
  gen_cluster = registry.on_device(cluster, devices[plan.rollout_pool])
  parts = gen_lib.decode_round(job.actor, job, e, gen_cluster, eff, conc, ctx)
  t = float(sum(parts)) + float(gen_lib.step_overhead_s(job.actor, e, gen_cluster, eff, conc))
  out.append(("generate (decode)", flops / nbytes, flops / t))
  # One micro-batch of each inference and training stage.
  seq = float(job.prompt_len) + float(job.response.mean)
  for st in algorithms.stage_graph(job):
    if st.kind not in (algorithms.INFER, algorithms.TRAIN):
      continue
    r = plan.role(st.role)
    layout = r.train if st.kind == algorithms.TRAIN else r.infer_layout
    model = plan_lib.role_model(job, st.role)
    tp, pp, cp = float(layout.tp), float(layout.pp), float(layout.cp)
    dp = gpus[r.pool] / (tp * pp * cp)
    per_rank = float(job.samples_per_step) / dp
    if st.kind == algorithms.TRAIN:
      per_rank /= job.mini_batches
    m = max(np.ceil(per_rank / float(layout.micro_batch) - 1e-9), 1.0)
    lm_head = registry.has_lm_head(st)
    work = layers.forward_work(model, per_rank / m * seq, 0.5 * seq, tp=tp, pp=pp, cp=cp,
                               ep=layout.ep, param_bytes=job.param_bytes, lm_head=lm_head,
                               sequence_parallel=layout.sequence_parallel,
                               flash_attention=layout.flash_attention)
    if st.kind == algorithms.TRAIN:
      full = float(layout.recompute) >= 2
      mult, coll, ce = 3.0 + full, 2.0 + full, eff.train_efficiency
    else:
      mult, coll, ce = 1.0, 1.0, 1.0
    pool_cluster = registry.on_device(cluster, devices[r.pool])
    pt = common.pass_time(work, mult, pool_cluster, eff, tp, cp, layout.ep, 0.0,
                          collective_multiplier=coll, compute_efficiency=ce)
    flops = mult * float(work.matmul_flops + work.attention_flops)
    nbytes = mult * float(work.weight_bytes + work.activation_bytes)
    out.append((st.name, flops / nbytes, flops / float(pt.compute_s + pt.memory_s + pt.comm_s)))
  return out
