"""Export of a plan to OpenRLHF: the argv of ``openrlhf.cli.train_ppo_ray``.

Flags of OpenRLHF v0.11.0 (commit 3c3be62) ``openrlhf/cli/train_ppo_ray.py``
(the dotted names introduced in v0.10.2).
"""

from __future__ import annotations

import math
import shlex

import costmodel as cm
from export._src.base import Exporter
from export._src.common import Concrete
from export._src.common import Scalar
from export._src.common import concrete
from export._src.common import fmt
from export._src.common import with_layouts
from export._src.nodes import node_layouts
from export._src.refusals import check_recompute
from export._src.refusals import check_sync
from export._src.refusals import refuse_degrees
from export._src.refusals import same_degrees
from export.openrlhf import record

_OPENRLHF_ESTIMATOR = {"ppo": "gae", "grpo": "group_norm", "dapo": "group_norm",
                       "reinforce_pp": "reinforce", "rloo": "rloo"}

VERSION = record.PIN


def _openrlhf_roles(c: Concrete) -> tuple[dict[str, bool], dict[str, str]]:
  """Colocation flags and the pool of every model, or ValueError."""
  fw = "OpenRLHF"
  a_pool, r_pool = c.actor_pool, c.rollout_pool
  others = {r: c.role_pool[r] for r in ("reference", "critic", "reward") if c.has(r)}
  flags = {"colocate_all": False, "colocate_actor_ref": False, "colocate_critic_reward": False}
  away = {r: p for r, p in others.items() if p != a_pool}
  if c.colocated or any(others.get(r) == a_pool for r in ("critic", "reward")):
    # Only --train.colocate_all shares the actor's GPUs with the vLLM engines
    # or with the critic and reward model, and it takes every model along.
    why = ("the vLLM engines share the actor's GPUs" if c.colocated
           else "the critic or reward model shares the actor's GPUs")
    if away:
      r, p = next(iter(away.items()))
      raise ValueError(f"{fw}: train.colocate_all: {why} only with --train.colocate_all, which "
                       f"places every model on the actor's pool {a_pool!r}, but {r} is on {p!r}")
    if not c.colocated and c.staleness == 0:
      raise ValueError(f"{fw}: train.colocate_all: {why} only with --train.colocate_all, which in "
                       "a synchronous run also places the vLLM engines there, but the rollout is "
                       f"on its own pool {r_pool!r}; make the plan asynchronous or move the role")
    flags["colocate_all"] = True
    return flags, others
  flags["colocate_actor_ref"] = others.get("reference") == a_pool
  if "critic" in away and "reward" in away and away["critic"] == away["reward"]:
    flags["colocate_critic_reward"] = True
    del away["reward"]
  seen = {a_pool: "actor", r_pool: "the vLLM engines"}
  for r, p in away.items():
    if p in seen:
      raise ValueError(f"{fw}: {r} on pool {p!r} shares it with {seen[p]}; OpenRLHF's colocation "
                       "flags (train.colocate_actor_ref, train.colocate_critic_reward, "
                       "train.colocate_all) cannot express that sharing")
    seen[p] = r
  return flags, others


def to_openrlhf(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
                vllm_default_max_seqs: bool = False) -> list[str]:
  """The argv of ``python3 -m openrlhf.cli.train_ppo_ray`` that runs ``plan``.

  Every model is a Ray group of ``num_nodes x num_gpus_per_node`` GPUs with
  one DeepSpeed setting (``--ds.*``) for all of them; vLLM engines fill the
  rollout pool (``num_engines = pool / tensor_parallel_size``). Colocation
  follows the plan: ``--train.colocate_all`` when the engines (synchronous)
  or the critic and reward model share the actor's pool,
  ``--train.colocate_actor_ref``, ``--train.colocate_critic_reward``.
  ``--rollout.batch_size`` counts prompts, ``--train.batch_size`` samples per
  optimizer step. ``offload`` (the CPU optimizer) maps to ``--ds.adam_offload``
  (DeepSpeed's ``offload_optimizer``; the training parameters stay on the
  GPU), ``swap`` of the actor and critic to ``--ds.enable_sleep`` (their
  DeepSpeed states go to the host while the engines generate, colocated
  synchronous runs), the reference's and reward model's ``offload`` to
  ``--ref.offload`` / ``--reward.offload`` (ZeRO ``offload_param``).
  Asynchronous plans use ``--train.async_queue_size = staleness``: the
  generator runs at most that many batches ahead of training. DAPO turns on
  ``--algo.dynamic_filtering_enable`` and oversamples with
  ``--rollout.vllm_generate_batch_size`` (asynchronous runs only: the queue
  buffers the extra batches). The model paths and, for rule-based rewards and
  dynamic filtering, ``--reward.remote_url`` are the user's to add.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job.
    cluster: The cluster.
    vllm_default_max_seqs: OpenRLHF has no flag for vLLM's ``max_num_seqs``
      (``create_vllm_engines`` passes none), so a plan is refused unless this
      is True, which lets vLLM pick its own limit instead of
      ``engine.max_seqs``.

  Returns:
    A list of arguments; pass it to :func:`openrlhf_command`.

  Raises:
    ValueError: naming the setting when OpenRLHF cannot express the plan:
      pipeline or expert parallelism in training (DeepSpeed), vLLM pipeline or
      expert parallelism, selective recompute, layouts or micro-batches that
      differ between models (one ``--ds.*`` and one micro-batch per phase),
      placements its colocation flags cannot express, ReMax, pools that are
      not uniform per node, batches that do not split over the ranks, AutoTP
      (tp > 1) with ZeRO-3, ``engine.max_seqs`` (see above), DAPO
      oversampling in a synchronous run, swap outside a colocated synchronous
      run or on the reference or reward model, a weight sync other than its
      own.

  References:
    OpenRLHF v0.11.0 ``openrlhf/cli/train_ppo_ray.py`` (the ``colocate_all``,
    ``vllm_generate_batch_size`` and sample-batch assertions) and
    ``openrlhf/trainer/ray/vllm_engine.py``; DeepSpeed AutoTP training
    supports ZeRO stages 0-2.
  """
  fw = "OpenRLHF"
  c = concrete(plan, job, cluster, fw, rule_set="openrlhf")
  if c.algorithm not in _OPENRLHF_ESTIMATOR:
    raise ValueError(f"{fw}: algorithm={c.algorithm!r} has no algo.advantage.estimator (gae, "
                     "reinforce, rloo, reinforce_baseline, group_norm, dr_grpo)")
  actor = c.train["actor"]
  refuse_degrees(fw, "actor.train", actor, ("pp", "vpp", "ep"),
                 "OpenRLHF trains with DeepSpeed (ZeRO, AutoTP, ring attention), which has no "
                 "pipeline or expert parallelism")
  check_recompute(fw, "actor.train", actor, "--actor.gradient_checkpointing_enable")
  e = c.engine
  refuse_degrees(fw, "engine", e, ("pp", "ep"),
                 "OpenRLHF's vLLM engines take only tensor_parallel_size")
  same_degrees(fw, "actor", actor, c.infer["actor"],
               "OpenRLHF computes old log-probs with the actor's DeepSpeed layout", state=True)
  # One --ds.* layout for every model, one micro-batch per phase.
  for role, phase in (("critic", "train"), ("critic", "infer"), ("reference", "infer"),
                      ("reward", "infer")):
    if not c.has(role):
      continue
    lay = getattr(c, phase)[role]
    names = ("tp", "pp", "cp", "ep", "vpp") + (("zero_stage", "offload", "swap", "recompute")
                                               if phase == "train" else ())
    for name in names:
      if getattr(lay, name) != getattr(actor, name):
        raise ValueError(f"{fw}: {role}.{phase}.{name}={getattr(lay, name)} differs from "
                         f"actor.train.{name}={getattr(actor, name)}; OpenRLHF applies one "
                         "--ds.* setting to every model")
  micro = {"train": actor.micro_batch, "infer": c.infer["actor"].micro_batch}
  for role in ("critic", "reference", "reward"):
    for phase in ("train", "infer"):
      lay = getattr(c, phase).get(role) if c.has(role) else None
      if lay is not None and lay.micro_batch != micro[phase]:
        key = "train.micro_batch_size" if phase == "train" else "rollout.micro_batch_size"
        raise ValueError(f"{fw}: {role}.{phase}.micro_batch={lay.micro_batch} differs from the "
                         f"actor's {micro[phase]}; OpenRLHF has one --{key} for every model")
  if actor.tp > 1 and actor.zero_stage == 3:
    raise ValueError(f"{fw}: actor.train.zero_stage=3 with actor.train.tp={actor.tp}: DeepSpeed "
                     "AutoTP (--ds.tensor_parallel_size > 1) trains with ZeRO stages 0-2 only; use "
                     "zero_stage <= 2 or tp 1")
  if not vllm_default_max_seqs:
    raise ValueError(f"{fw}: engine.max_seqs={e.max_seqs} has no flag (train_ppo_ray.py passes no "
                     "max_num_seqs to vLLM); pass vllm_default_max_seqs=True to let vLLM choose")

  flags, others = _openrlhf_roles(c)
  shared = flags["colocate_all"] and c.staleness == 0
  check_sync(fw, c, "ipc" if shared else "per_tensor",
             "CUDA IPC handles, one per tensor (train.colocate_all)" if shared else
             "NCCL broadcasts, one per tensor (ppo_actor.py broadcast_to_vllm)")
  if actor.swap and not shared:
    raise ValueError(f"{fw}: actor.train.swap=1 with the vLLM engines on their own pool: "
                     "--ds.enable_sleep moves the DeepSpeed states to the host while the engines "
                     "share the actor's GPUs (--train.colocate_all, synchronous)")
  for role in ("reference", "reward"):
    if c.has(role) and c.infer[role].swap:
      key = "ref" if role == "reference" else "reward"
      raise ValueError(f"{fw}: {role}.infer.swap=1: --{key}.offload keeps the {role}'s "
                       f"parameters on the host for every pass; use {role} offload=1, swap=0")
  placed = {c.actor_pool: c.pools[c.actor_pool], c.rollout_pool: c.pools[c.rollout_pool]}
  placed.update({p: c.pools[p] for p in others.values()})
  nodes = node_layouts(placed, cluster, fw)

  actor_gpus = c.pools[c.actor_pool]
  if flags["colocate_all"] and c.staleness == 0:
    if actor_gpus != c.replicas() * e.tp:
      raise ValueError(f"{fw}: train.colocate_all needs actor GPUs ({actor_gpus}) == "
                       f"vllm.num_engines x vllm.tensor_parallel_size ({c.replicas()} x {e.tp})")
  args: list[tuple[str, Scalar | None]] = []  # (dotted name, value or None for a flag)
  for role, key in (("actor", "actor"), ("reference", "ref"), ("critic", "critic"),
                    ("reward", "reward")):
    if role == "actor" or c.has(role):
      nn, g = nodes[c.role_pool[role]]
      args += [(f"{key}.num_nodes", nn), (f"{key}.num_gpus_per_node", g)]
  args += [("vllm.num_engines", c.replicas()), ("vllm.tensor_parallel_size", e.tp),
           ("vllm.gpu_memory_utilization", e.memory_fraction)]
  if e.prefix_caching:
    args.append(("vllm.enable_prefix_caching", None))
  for name in ("colocate_all", "colocate_actor_ref", "colocate_critic_reward"):
    if flags[name]:
      args.append((f"train.{name}", None))
  if shared:  # the engines sleep while the models train
    args.append(("vllm.enable_sleep", None))
  if actor.swap:
    args.append(("ds.enable_sleep", None))
  if not e.cuda_graphs:
    args.append(("vllm.enforce_eager", None))
  args += [("ds.zero_stage", actor.zero_stage), ("ds.tensor_parallel_size", actor.tp),
           ("ds.ring_attn_size", actor.cp)]
  if actor.cp > 1:
    args.append(("ds.packing_samples", None))  # ring attention runs on packed samples
  if actor.offload:
    args.append(("ds.adam_offload", None))
  if actor.recompute == 2:
    args.append(("actor.gradient_checkpointing_enable", None))
  for role, key in (("reference", "ref.offload"), ("reward", "reward.offload")):
    if c.has(role) and c.infer[role].offload:
      args.append((key, None))

  dp = actor_gpus // (actor.tp * actor.cp)
  samples = c.prompts * c.n
  mini = c.mini_batch_prompts("train.batch_size", fw) * c.n
  if samples // micro["infer"] < dp:
    raise ValueError(f"{fw}: rollout.micro_batch_size={micro['infer']} leaves "
                     f"{samples // micro['infer']} micro-batches for {dp} actor processes "
                     "(OpenRLHF asserts at least one each)")
  args += [("rollout.batch_size", c.prompts), ("rollout.n_samples_per_prompt", c.n),
           ("rollout.micro_batch_size", micro["infer"]), ("train.batch_size", mini),
           ("train.micro_batch_size", actor.micro_batch), ("train.max_epochs", c.ppo_epochs),
           ("data.max_len", c.prompt_len + c.max_response),
           ("rollout.max_new_tokens", c.max_response),
           ("algo.advantage.estimator", _OPENRLHF_ESTIMATOR[c.algorithm])]
  if not c.use_reference:
    args.append(("algo.kl.init_coef", 0.0))  # no reference model is created
  if c.algorithm == "dapo":
    args.append(("algo.dynamic_filtering_enable", None))
    gen = math.ceil(c.prompts * c.oversample - 1e-6)
    if gen > c.prompts:
      if c.staleness == 0:
        raise ValueError(f"{fw}: job.oversample={c.oversample:g}: "
                         "--rollout.vllm_generate_batch_size > --rollout.batch_size needs "
                         "--train.async_enable (train_ppo_ray.py); make the plan asynchronous")
      args.append(("rollout.vllm_generate_batch_size", gen))
  if c.staleness > 0:
    args += [("train.async_enable", None), ("train.async_queue_size", c.staleness)]
    if c.partial_rollout:
      args.append(("train.partial_rollout_enable", None))

  argv: list[str] = []
  for name, value in args:
    argv.append("--" + name)
    if value is not None:
      argv.append(fmt(value))
  return argv


def openrlhf_command(argv: list[str]) -> str:
  """``python3 -m openrlhf.cli.train_ppo_ray ...``, quoted with :func:`shlex.join`."""
  return shlex.join(["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv])


def as_run(plan: cm.Plan, **_) -> cm.Plan:
  """The plan as OpenRLHF runs it: CUDA IPC when the engines share the actor's GPUs in a
  synchronous run, per-tensor NCCL broadcasts otherwise."""
  shared = plan.shares_pool("actor") and plan.mode.staleness == 0
  return with_layouts(plan, {}, "ipc" if shared else "per_tensor")


EXPORTER = Exporter(name=record.NAME, framework=record.FRAMEWORK, version=VERSION,
                    to_config=to_openrlhf, render_settings=openrlhf_command, kind="command",
                    adapt=as_run,
                    forces={
                        "engine.sync_backend": "CUDA IPC handles per tensor with "
                        "train.colocate_all in a synchronous run, else ppo_actor.py "
                        "broadcast_to_vllm per tensor"})
