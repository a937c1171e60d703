"""What real RL systems add around the kernels, one mechanism per test.

Generation ends with the slowest replica's longest request (veRL issue #658,
UniRL issue #40); the engine pays a per-step overhead that grows with the
batch, the engine's GPUs, eager mode and a span over nodes; weight sync
depends on the backend; the batch moves between roles through the
controller; attention sees the length distribution's second moment.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import infer as infer_lib
from costmodel._src.stages import sync as sync_lib

EFF = cm.Efficiency()


@pytest.fixture(scope="module")
def h100_cluster(h100):
  return cm.Cluster(h100, gpus_per_node=8, nodes=32)


def _job(model, samples=8.0, mean=1000.0, max_len=4096.0, prompts=64.0, bins=None):
  return cm.RLJob("grpo", model, prompts_per_step=prompts, samples_per_prompt=samples,
                  prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(mean, max_len, bins=bins))


def _gen(model, job, engine, gpus, cluster, eff=EFF, tau=0.0):
  return gen_lib.generate(model, job, engine, float(gpus), cluster, eff, tau)


# ----- generation ends with the slowest replica's longest request ------------


def test_same_mean_longer_maximum_lengthens_generation(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  times = [float(_gen(model, _job(model, mean=1000.0, max_len=m), cm.Engine(tp=1.0), 16,
                      h100_cluster).time_s) for m in (2048.0, 4096.0, 8192.0, 16384.0)]
  assert all(b > 1.1 * a for a, b in zip(times, times[1:], strict=False))


def test_slowest_replica_longest_is_the_expected_maximum():
  knots = jnp.asarray([100.0, 300.0, 1000.0, 4000.0])
  # p = 1 - (1 - 1/4)^N of reaching the top bin.
  for n, p in ((1.0, 0.25), (4.0, 1 - 0.75**4), (64.0, 1 - 0.75**64)):
    want = 1000.0 + p * 3000.0
    assert float(gen_lib.slowest_replica_longest(knots, n)) == pytest.approx(want, rel=1e-6)
  g = jax.grad(lambda n: gen_lib.slowest_replica_longest(knots, n))(8.0)
  assert np.isfinite(float(g)) and float(g) > 0


def test_more_replicas_stop_helping_once_each_replicas_longest_dominates(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model, samples=16.0, mean=1000.0, max_len=8192.0, prompts=256.0)  # 4,096
  gpus = (4, 16, 64, 256)
  times = [float(_gen(model, job, cm.Engine(tp=1.0), g, h100_cluster).time_s) for g in gpus]
  assert all(b < a for a, b in zip(times, times[1:], strict=False))
  speedups = [a / b for a, b in zip(times, times[1:], strict=False)]
  assert speedups[0] > 1.5  # 1,024 -> 256 requests per replica: a real gain
  assert speedups[-1] < 1.1  # 64 -> 16: each replica's longest request sets the time
  # The floor: the longest request decoded at batch 1, step by step.
  c = _gen(model, job, cm.Engine(tp=1.0), 256, h100_cluster)
  one = gen_lib.decode_round(model, job, cm.Engine(tp=1.0), h100_cluster, EFF, jnp.ones(()),
                             512.0 + 4096.0)
  floor = 8192.0 * (sum(float(x) for x in one) + float(gen_lib.step_overhead_s(
      model, cm.Engine(tp=1.0), h100_cluster, EFF, 1.0)))
  assert float(c.time_s) > 0.8 * floor


def test_per_worker_time_tracks_its_longest_response_not_its_tokens(h100_cluster):
  # veRL issue #658: three workers, longest responses 3,768 / 6,233 / 8,412
  # tokens for 28k / 43k / 41k tokens in all, rollout 73 / 119 / 167 s: time per
  # longest token constant (19-20 ms), not per token.
  model = cm.models.get("qwen2.5-7b")
  per_max = []
  for longest, total in ((3768.0, 28013.0), (6233.0, 42765.0), (8412.0, 41247.0)):
    n = 16.0
    job = cm.RLJob("grpo", model, prompts_per_step=1.0, samples_per_prompt=n, prompt_len=512.0,
                   response=cm.ResponseLength.from_mean_max(total / n, longest, bins=16))
    c = _gen(model, job, cm.Engine(tp=1.0), 1, h100_cluster)
    per_max.append(float(c.time_s) / longest)
  assert max(per_max) / min(per_max) < 1.2
  totals = (28013.0, 42765.0, 41247.0)
  per_token = [t * m / tot for t, m, tot in zip(per_max, (3768.0, 6233.0, 8412.0), totals,
                                                 strict=True)]
  assert max(per_token) / min(per_token) > 1.4


def test_tp2_beats_tp1_on_a_heavy_tail_but_not_on_uniform_lengths(h100_cluster):
  # UniRL issue #40: equal on uniform lengths, 1.2-1.5x faster on DAPO's tail.
  model = cm.models.get("qwen2.5-7b")
  uniform = _job(model, samples=16.0, mean=2048.0, max_len=2048.0, prompts=256.0, bins=1)
  tail = _job(model, samples=16.0, mean=2048.0, max_len=16384.0, prompts=256.0)

  def ratio(job):
    t1 = float(_gen(model, job, cm.Engine(tp=1.0), 32, h100_cluster).time_s)
    t2 = float(_gen(model, job, cm.Engine(tp=2.0), 32, h100_cluster).time_s)
    return t1 / t2

  assert ratio(uniform) == pytest.approx(1.0, abs=0.1)
  assert ratio(tail) > 1.2


# ----- per-step engine overhead ----------------------------------------------


def test_step_overhead_by_hand(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  e = EFF
  base = float(gen_lib.step_overhead_s(model, cm.Engine(tp=2.0), h100_cluster, e, 64.0))
  assert base == pytest.approx(e.decode_step_overhead_s + 64.0 * e.decode_seq_overhead_s
                               + e.decode_rank_overhead_s, rel=1e-6)
  eager = float(gen_lib.step_overhead_s(model, cm.Engine(tp=2.0, cuda_graphs=False),
                                        h100_cluster, e, 64.0))
  assert eager - base == pytest.approx(model.n_layers * e.eager_layer_overhead_s, rel=1e-5)
  # An engine over two nodes pays the cross-node RPC on top of 15 more ranks.
  wide = float(gen_lib.step_overhead_s(model, cm.Engine(tp=16.0 / 8.0 * 8.0), h100_cluster, e,
                                       64.0))
  assert wide - base == pytest.approx(e.cross_node_step_overhead_s
                                      + 14.0 * e.decode_rank_overhead_s, rel=1e-5)


def test_eager_engine_generates_slower(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model)
  graphs = _gen(model, job, cm.Engine(tp=1.0), 8, h100_cluster)
  eager = _gen(model, job, cm.Engine(tp=1.0, cuda_graphs=False), 8, h100_cluster)
  assert float(eager.time_s) > float(graphs.time_s)
  assert float(eager.compute_s) == pytest.approx(float(graphs.compute_s), rel=1e-6)
  assert float(eager.overhead_s) > float(graphs.overhead_s)


def test_generation_relaxed_gradients_are_finite(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model)

  def t(tp, seq_over):
    eff = cm.Efficiency(decode_seq_overhead_s=seq_over)
    return _gen(model, job, cm.Engine(tp=tp), 16.0, h100_cluster, eff, tau=0.05).time_s

  g = jax.grad(t, argnums=(0, 1))(jnp.asarray(2.0), jnp.asarray(20e-6))
  assert all(np.isfinite(float(x)) for x in g)
  assert float(g[1]) > 0


# ----- weight sync by backend -------------------------------------------------


def _sync(model, backend, cluster, train=None, gpus=16.0, colocated=False):
  job = _job(model)
  train = train if train is not None else cm.Parallel(zero_stage=1.0, ep=8.0 if model.is_moe
                                                      else 1.0)
  return sync_lib.weight_sync(model, job, train, gpus, cm.Engine(tp=8.0, sync_backend=backend),
                              gpus, colocated, cluster, EFF)


def test_bucketed_beats_per_tensor_and_reshard_beats_both(h100_cluster):
  model = cm.models.get("qwen3-30b-a3b")
  t = {b: float(_sync(model, b, h100_cluster).time_s)
       for b in ("per_tensor", "bucketed", "reshard")}
  assert t["reshard"] < t["bucketed"] < t["per_tensor"]
  # Per tensor vs bucketed differ by the software cost alone.
  total = model.total_params * 2.0
  diff = model.n_tensors * EFF.sync_per_tensor_s - (
      1.0 + total / EFF.sync_bucket_bytes) * EFF.sync_per_bucket_s
  assert t["per_tensor"] - t["bucketed"] == pytest.approx(diff, rel=1e-4)


def test_ipc_is_colocated_only_and_reshard_disaggregated_only(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model)
  cluster = cm.Cluster(h100_cluster.accelerator, 8, 2)
  split = cm.Plan.split(job, cluster, 8, engine=cm.Engine(tp=2.0, sync_backend="ipc"))
  with pytest.raises(ValueError, match="sync_backend='ipc'"):
    cm.validate_plan(job, split, cluster)
  colo = cm.Plan.colocated(job, cluster, engine=cm.Engine(tp=2.0, sync_backend="reshard"))
  with pytest.raises(ValueError, match="sync_backend='reshard'"):
    cm.validate_plan(job, colo, cluster)
  with pytest.raises(ValueError, match="sync_backend='nccl'"):
    cm.Engine(sync_backend="nccl")
  ipc = _sync(model, "ipc", h100_cluster, gpus=8.0, colocated=True)
  per_tensor = _sync(model, "per_tensor", h100_cluster, gpus=8.0, colocated=True)
  assert float(ipc.comm_s) == pytest.approx(float(per_tensor.comm_s), rel=1e-6)
  assert float(ipc.time_s) < float(per_tensor.time_s)


def test_deepseek_v3_reshard_refit_takes_seconds(h100_cluster):
  # NeMo-RL: PP16xEP16 -> TP32xDP8 in 2.4-2.8 s on H100; per tensor is slower.
  big = cm.Cluster(h100_cluster.accelerator, 8, 64)
  model = cm.models.get("deepseek-v3")
  train = cm.Parallel(pp=16.0, ep=16.0, zero_stage=1.0)
  job = _job(model)
  t = sync_lib.weight_sync(model, job, train, 256.0, cm.Engine(tp=32.0, sync_backend="reshard"),
                           256.0, False, big, EFF)
  assert 1.0 < float(t.time_s) < 5.0
  slow = sync_lib.weight_sync(model, job, train, 256.0, cm.Engine(tp=32.0), 256.0, False, big,
                              EFF)
  assert float(slow.time_s) > 5.0 * float(t.time_s)


# ----- framework overheads: batch hand-off and attention context ---------------


def test_batch_transfer_is_per_padded_token(h100_cluster):
  model = cm.models.get("qwen2.5-7b")
  job = _job(model, samples=8.0, mean=1000.0, max_len=4096.0)
  want = 512.0 * (512.0 + 4096.0) * 32.0 / 1e9
  assert float(infer_lib.batch_transfer_s(job, EFF)) == pytest.approx(want, rel=1e-6)
  layout = cm.Parallel(zero_stage=3.0)
  base = infer_lib.infer(model, job, layout, 8.0, h100_cluster, EFF)
  slow = infer_lib.infer(model, job, layout, 8.0, h100_cluster,
                         cm.Efficiency(batch_transfer_bytes_per_s=0.5e9))
  assert float(slow.overhead_s - base.overhead_s) == pytest.approx(want, rel=1e-5)
  assert float(slow.compute_s) == pytest.approx(float(base.compute_s), rel=1e-6)


def test_attention_context_is_length_biased():
  model = cm.models.get("qwen2.5-7b")
  fixed = _job(model, mean=1000.0, max_len=1000.0, bins=1)
  assert float(infer_lib.attention_context(fixed)) == pytest.approx(0.5 * 1512.0, rel=1e-6)
  tail = _job(model, mean=1000.0, max_len=16384.0)
  s = 512.0 + np.asarray(tail.response.knots)
  assert float(infer_lib.attention_context(tail)) == pytest.approx(
      0.5 * np.mean(s**2) / np.mean(s), rel=1e-5)
  assert float(infer_lib.attention_context(tail)) > 2.0 * 0.5 * 1512.0


# ----- engine memory on a dedicated pool ----------------------------------------


def test_dedicated_rollout_pool_gives_the_engine_more_memory(h100):
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(h100, 8, 2)
  job = _job(model, samples=16.0)
  split = cm.Plan.split(job, cluster, 8, engine=cm.Engine(tp=2.0))
  colo = cm.Plan.colocated(job, cluster, engine=cm.Engine(tp=2.0))
  assert float(split.engine.memory_fraction) == 0.9
  assert float(colo.engine.memory_fraction) == 0.6
  # An explicit fraction is kept whatever the placement.
  assert float(cm.Plan.split(job, cluster, 8, engine=cm.Engine(
      tp=2.0, memory_fraction=0.5)).engine.memory_fraction) == 0.5
  kv = {}
  for name, plan in (("dedicated", split), ("shared", colo)):
    c = gen_lib.generate(model, job, plan.engine, 8.0, cluster, EFF)
    kv[name] = float(c.extras["kv_tokens"])
  per_token = float(gen_lib.kv_bytes_per_token_per_gpu(model, cm.Engine(tp=2.0), 2.0))
  assert kv["dedicated"] - kv["shared"] == pytest.approx(0.3 * h100.hbm_bytes / per_token,
                                                         rel=1e-5)


# ----- colocated switching: swap to host, decoupled from CPU Adam -----------------


def test_swapping_states_frees_memory_and_costs_host_link_time(h100):
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(h100, 8, 1)
  job = _job(model, samples=8.0)
  base = cm.Parallel(zero_stage=3.0, micro_batch=2.0)
  kept = cm.estimate(job, cm.Plan.colocated(job, cluster, train=base), cluster)
  swapped = cm.estimate(job, cm.Plan.colocated(job, cluster, train=base.replace(swap=1.0)),
                        cluster)
  i = kept.stage_names.index("generate")
  freed = float(kept.memory_bytes[i].sum() - swapped.memory_bytes[i].sum())
  state = kept.stage("actor_update")
  m = np.asarray(kept.memory_bytes)[kept.stage_names.index("actor_update")]
  actor_state = m[0] + m[2]  # weights + optimizer held by the actor's training
  assert freed == pytest.approx(actor_state, rel=1e-5)
  # The switch moves that state to the host and back over the host link.
  host = h100.host_bandwidth_bytes_per_s * EFF.host_efficiency
  extra = swapped.stage("switch")["comm_s"] - kept.stage("switch")["comm_s"]
  assert extra == pytest.approx(2.0 * actor_state / host, rel=1e-4)
  # Training itself is unchanged: swapping is not the CPU optimizer.
  assert swapped.stage("actor_update")["time_s"] == pytest.approx(state["time_s"], rel=1e-6)
  cpu_adam = cm.estimate(job, cm.Plan.colocated(job, cluster, train=base.replace(offload=1.0)),
                         cluster)
  assert cpu_adam.stage("actor_update")["time_s"] > state["time_s"]


# ----- the lower bound is a bound -------------------------------------------------


def test_lower_bound_is_below_every_plan_and_independent_of_layout_and_mode(h100):
  model = cm.models.get("qwen2.5-1.5b")
  cluster = cm.Cluster(h100, 8, 1)
  job = _job(model, samples=8.0, mean=1000.0, max_len=8192.0, prompts=64.0)
  e = cm.Engine
  plans = [cm.Plan.colocated(job, cluster, engine=e(tp=tp)) for tp in (1.0, 2.0, 4.0)]
  plans += [cm.Plan.split(job, cluster, g, engine=e(tp=1.0), mode=mode)
            for g in (2, 4, 6)
            for mode in (cm.Mode(), cm.Mode(staleness=1),
                         cm.Mode(staleness=1, partial_rollout=True),
                         cm.Mode(staleness=4, partial_rollout=True, rollout_log_probs=True),
                         cm.Mode(staleness=1, staleness_threshold=0.1, partial_rollout=True))]
  plans += [cm.Plan.colocated(job, cluster, engine=e(tp=1.0), mode=cm.Mode(fuse_inference=True),
                              train=cm.Parallel(zero_stage=3.0, swap=1.0))]
  ests = [cm.estimate(job, p, cluster) for p in plans]
  bounds = {round(float(x.lower_bound_s), 9) for x in ests}
  assert len(bounds) == 1
  lower = bounds.pop()
  steps = [float(x.step_time_s) for x in ests]
  assert lower > 0 and all(lower <= s for s in steps)
  assert lower > 0.1 * min(steps)  # a bound, not zero


# ----- asynchronous modes ---------------------------------------------------------


def _async_plans(job, cluster):
  e = cm.Engine(tp=1.0)
  return {t: cm.Plan.split(job, cluster, 4, engine=e, mode=cm.Mode(
      staleness=1, staleness_threshold=t, partial_rollout=True, rollout_log_probs=True))
          for t in (0.0, 0.1, 0.5, 1.0)}


def test_deeper_queue_never_slows_the_step(h100):
  model = cm.models.get("qwen2.5-1.5b")
  cluster = cm.Cluster(h100, 8, 1)
  job = _job(model, samples=8.0, mean=1000.0, max_len=16384.0, prompts=64.0)
  steps = {t: float(cm.estimate(job, p, cluster).step_time_s)
           for t, p in _async_plans(job, cluster).items()}
  order = sorted(steps)
  assert all(steps[a] >= steps[b] - 1e-6 for a, b in zip(order, order[1:], strict=False))
  assert steps[0.0] > steps[1.0]


def test_partial_generation_keeps_the_tail_a_shallow_queue_cannot_absorb():
  from costmodel._src.stages import common  # pylint: disable=g-import-not-at-top
  from costmodel._src.step import schedule as schedule_lib  # pylint: disable=g-import-not-at-top
  z = jnp.zeros(())
  gen = common.make_cost(jnp.asarray(100.0), z, z, z, z, z, z, z, common.Memory.zeros(),
                         steady_time_s=jnp.asarray(60.0))
  # Tail 40 s; a queue of 0.5 step absorbs 30 s of it, 1 step all of it.
  assert float(schedule_lib.partial_generation_s(gen, 0.5)) == pytest.approx(70.0)
  assert float(schedule_lib.partial_generation_s(gen, 1.0)) == pytest.approx(60.0)
  assert float(schedule_lib.partial_generation_s(gen, 0.0)) == pytest.approx(100.0)


def test_streaming_trainer_overlaps_generation_and_pays_per_call(h100):
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(h100, 8, 2)
  job = cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=8.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0), mini_batches=8)
  e = cm.Engine(tp=1.0)
  sequential = cm.estimate(job, cm.Plan.split(job, cluster, 8, engine=e), cluster)
  streamed = {rb: cm.estimate(job, cm.Plan.split(job, cluster, 8, engine=e, mode=cm.Mode(
      require_batches=rb)), cluster) for rb in (1, 2, 8)}
  assert float(streamed[2].step_time_s) < float(sequential.step_time_s)
  # More, smaller calls: each pays the trainer-call overhead.
  upd = {rb: est.stage("actor_update")["overhead_s"] for rb, est in streamed.items()}
  assert upd[1] - upd[8] == pytest.approx(7.0 * EFF.train_call_overhead_s, rel=1e-4)
  with pytest.raises(ValueError, match="require_batches=3 must divide"):
    cm.estimate(job, cm.Plan.split(job, cluster, 8, engine=e,
                                   mode=cm.Mode(require_batches=3)), cluster)
  with pytest.raises(ValueError, match="streaming"):
    cm.estimate(job, cm.Plan.colocated(job, cluster, engine=e,
                                       mode=cm.Mode(require_batches=1)), cluster)


def test_rollout_log_probs_drop_the_old_log_prob_pass(h100):
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(h100, 8, 1)
  job = _job(model)
  plain = cm.estimate(job, cm.Plan.colocated(job, cluster), cluster)
  engine = cm.estimate(job, cm.Plan.colocated(job, cluster, mode=cm.Mode(
      rollout_log_probs=True)), cluster)
  assert "old_log_prob" in plain.stage_names and "old_log_prob" not in engine.stage_names
  assert float(engine.step_time_s) < float(plain.step_time_s)


@pytest.mark.parametrize("kwargs, field", [
    (dict(staleness=1, staleness_threshold=-0.1), "staleness_threshold"),
    (dict(staleness_threshold=0.5), "staleness_threshold"),
    (dict(require_batches=0), "require_batches"),
])
def test_mode_rejects_bad_async_settings(kwargs, field):
  with pytest.raises(ValueError, match=field):
    cm.Mode(**kwargs)
