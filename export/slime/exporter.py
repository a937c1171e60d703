"""Export of a plan to slime: the argv of ``train.py`` or ``train_async.py``.

Flags of THUDM/slime@624b824 ``slime/utils/arguments.py``, and the Megatron-LM
and SGLang flags (``--sglang-*``) that slime passes through, as its launch
scripts (``scripts/*.sh``) write them.
"""

from __future__ import annotations

import math
import shlex

import costmodel as cm
from export._src import speculative_keys
from export._src.base import Exporter
from export._src.common import Scalar
from export._src.common import concrete
from export._src.common import fmt
from export._src.common import kv_cache_dtype
from export._src.common import shares_rollout
from export._src.common import with_layouts
from export._src.nodes import node_layouts
from export._src.refusals import check_sync
from export._src.refusals import refuse_degrees
from export._src.refusals import refuse_reward_model_and_epochs
from export._src.refusals import same_degrees
from export._src.refusals import training_fp8
from export.slime import record

VERSION = record.PIN

_FW = "slime"
_ESTIMATOR = {"ppo": "ppo", "grpo": "grpo", "dapo": "grpo", "reinforce_pp": "reinforce_plus_plus"}
# the filter that --dynamic-sampling-filter-path's help names for DAPO
_DAPO_FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


def to_slime(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> dict:
  """The arguments of slime's ``train.py`` (or ``train_async.py``) that run ``plan``.

  The actor trains with Megatron on ``--actor-num-nodes x
  --actor-num-gpus-per-node``; the critic (PPO) shares its GPUs and layout;
  SGLang engines of ``--rollout-num-gpus-per-engine`` GPUs either share them
  (``--colocate``) or take ``--rollout-num-gpus`` of their own. A synchronous
  plan runs ``train.py``; a one-step-off plan runs ``train_async.py``, which
  generates the next rollout while training on the current one. The model,
  data and reference checkpoint paths are the user's to add.

  Returns:
    ``{"script": "train.py" or "train_async.py", "argv": [...]}``; pass it to
    :func:`slime_command`.

  Raises:
    ValueError: naming the setting when slime cannot run the plan: RLOO or
      ReMax, a reward model on GPUs (slime scores with ``--rm-type`` /
      ``--custom-rm-path``), more than one epoch, a critic or reference layout
      that differs from the actor's, ZeRO-2/3, interleaved pipelines,
      engine pipeline parallelism, staleness above 1 or asynchronous
      colocation (``train_async.py`` asserts ``not args.colocate``), pools
      that are not uniform per node, batches that do not split.

  References:
    THUDM/slime@624b824 ``slime/utils/arguments.py`` (``slime_validate_args``),
    ``train_async.py``, ``slime/ray/placement_group.py``.
  """
  c = concrete(plan, job, cluster, _FW, rule_set="slime", supports=frozenset(
      {"etp", "dp_attention", "engine_precision", "rollout_log_probs", "train_precision",
       "speculative"}))
  if c.algorithm not in _ESTIMATOR:
    raise ValueError(f"{_FW}: algorithm={c.algorithm!r}: --advantage-estimator has grpo, gspo, "
                     "cispo, reinforce_plus_plus(_baseline) and ppo")
  refuse_reward_model_and_epochs(_FW, c, "--rm-type, --rm-url or --custom-rm-path",
                                 "trains one pass per rollout (--num-steps-per-rollout "
                                 "optimizer steps)")
  actor = c.train["actor"]
  same_degrees(_FW, "actor", actor, c.infer["actor"],
               "slime computes log-probs with the actor's Megatron layout", state=True)
  for role, lay in (("reference", c.infer.get("reference")), ("critic", c.train.get("critic")),
                    ("critic", c.infer.get("critic"))):
    if lay is None:
      continue
    if c.role_pool[role] != c.actor_pool:
      raise ValueError(f"{_FW}: {role} on pool {c.role_pool[role]!r}: slime places it on the "
                       "actor's GPUs (placement_group.py)")
    names = ("tp", "pp", "cp", "ep", "vpp", "etp", "micro_batch") + (
        ("zero_stage", "recompute", "sequence_parallel") if role == "critic" else ())
    for name in names:
      if getattr(lay, name) != getattr(actor, name):
        raise ValueError(f"{_FW}: {role}.{name}={getattr(lay, name)} differs from "
                         f"actor.train.{name}={getattr(actor, name)}; slime gives every model "
                         "the actor's Megatron flags and --micro-batch-size")
  _state(c)
  if c.infer["actor"].micro_batch != actor.micro_batch:
    raise ValueError(f"{_FW}: actor.infer.micro_batch={c.infer['actor'].micro_batch} differs from "
                     f"actor.train.micro_batch={actor.micro_batch}; slime has one "
                     "--micro-batch-size")
  refuse_degrees(_FW, "actor.train", actor, ("vpp",),
                 "slime's launch scripts set no interleaved pipeline flag")
  if actor.zero_stage > 1:
    raise ValueError(f"{_FW}: actor.train.zero_stage={actor.zero_stage}: Megatron shards "
                     "optimizer state only (--use-distributed-optimizer, ZeRO-1)")
  e = c.engine
  refuse_degrees(_FW, "engine", e, ("pp",), "an SGLang engine spans --rollout-num-gpus-per-engine "
                 "GPUs of tensor parallelism")
  if c.staleness > 1:
    raise ValueError(f"{_FW}: staleness={c.staleness}: train_async.py overlaps exactly one rollout "
                     "with training (one step off-policy)")
  if c.staleness and c.colocated:
    raise ValueError(f"{_FW}: staleness={c.staleness} with the rollout on the actor's GPUs: "
                     "train_async.py asserts not --colocate")

  placed = {c.actor_pool: c.pools[c.actor_pool], c.rollout_pool: c.pools[c.rollout_pool]}
  nodes = node_layouts(placed, cluster, _FW)
  args: list[tuple[str, Scalar | None]] = []
  nn, g = nodes[c.actor_pool]
  args += [("actor-num-nodes", nn), ("actor-num-gpus-per-node", g),
           ("num-gpus-per-node", cluster.gpus_per_node)]
  if c.colocated:
    args.append(("colocate", None))
  else:
    args.append(("rollout-num-gpus", c.pools[c.rollout_pool]))
  args.append(("rollout-num-gpus-per-engine", e.tp))
  args += [("tensor-model-parallel-size", actor.tp), ("pipeline-model-parallel-size", actor.pp),
           ("context-parallel-size", actor.cp), ("expert-model-parallel-size", actor.ep)]
  if c.moe:
    args.append(("expert-tensor-parallel-size", actor.etp))
  if actor.sequence_parallel_on:
    args.append(("sequence-parallel", None))
  if actor.zero_stage == 1:
    args.append(("use-distributed-optimizer", None))
  if actor.swap != c.colocated:  # --colocate moves the actor to the host while SGLang runs
    args.append(("offload-train" if actor.swap else "no-offload-train", None))
  if actor.offload:
    if actor.zero_stage != 1:
      raise ValueError(f"{_FW}: actor.train.offload=1 with zero_stage=0: Megatron's "
                       "--optimizer-cpu-offload needs --use-distributed-optimizer")
    args += [("optimizer-cpu-offload", None), ("overlap-cpu-optimizer-d2h-h2d", None),
             ("use-precision-aware-optimizer", None)]
  if training_fp8(_FW, c, "--fp8-format"):  # delayed per-tensor scaling (Transformer Engine)
    args += [("fp8-format", "e4m3"), ("fp8-recipe", "delayed")]
  if actor.recompute:
    args.append(("recompute-granularity", "full" if actor.recompute == 2 else "selective"))
    if actor.recompute == 2:
      args += [("recompute-method", "uniform"), ("recompute-num-layers", 1)]

  gbs = c.mini_batch_prompts("--global-batch-size", _FW) * c.n
  args += [("advantage-estimator", _ESTIMATOR[c.algorithm]),
           ("rollout-batch-size", c.prompts), ("n-samples-per-prompt", c.n),
           ("global-batch-size", gbs), ("micro-batch-size", actor.micro_batch),
           ("rollout-max-prompt-len", c.prompt_len), ("rollout-max-response-len", c.max_response),
           ("sglang-mem-fraction-static", e.memory_fraction),
           ("sglang-max-running-requests", e.max_seqs)]
  if e.ep > 1:
    args.append(("sglang-ep-size", e.ep))
  if not e.prefix_caching:
    args.append(("sglang-disable-radix-cache", None))
  if e.dp_attention:
    args += [("sglang-enable-dp-attention", None), ("sglang-dp-size", e.tp)]
  kv = kv_cache_dtype(_FW, plan.engine.precision, "--sglang-kv-cache-dtype")
  if kv:
    args.append(("sglang-kv-cache-dtype", kv))
  if plan.engine.speculative is not None:  # SGLang's flags, --sglang- prefixed
    args += [(k[2:], v) for k, v in
             speculative_keys.framework_keys("slime", plan.engine.speculative).items()]
  if c.mode.rollout_log_probs:
    args.append(("use-rollout-logprobs", None))
  if c.use_reference:
    args.append(("use-kl-loss", None))
  if c.algorithm == "dapo":
    args += [("over-sampling-batch-size", math.ceil(c.prompts * c.oversample - 1e-6)),
             ("dynamic-sampling-filter-path", _DAPO_FILTER)]
  if c.partial_rollout:
    args.append(("partial-rollout", None))
  argv = []
  for name, value in args:
    argv.append("--" + name)
    if value is not None:
      argv.append(fmt(value))
  return {"script": "train_async.py" if c.staleness else "train.py", "argv": argv}


def _state(c) -> None:
  """Engine features and the reference's and critic's offload and swap slime has keys for.

  The reference's weights live on the host (slime/utils/tensor_backper.py backs them up in
  pinned CPU memory and switches them into the actor's model for their pass): ``swap`` 1.
  The critic trains beside the actor with the actor's offload flags.
  """
  e = c.engine
  if not e.cuda_graphs:
    raise ValueError(f"{_FW}: engine.cuda_graphs=False: SGLang's flag comes from the installed "
                     "SGLang (slime passes --sglang-* through), whose version slime@624b824 does "
                     "not pin and whose flag no slime script sets; export with cuda_graphs=True")
  check_sync(_FW, c, "ipc" if c.colocated else "bucketed",
             "CUDA IPC buckets (--colocate)" if c.colocated else
             "NCCL broadcasts of --update-weight-buffer-size buckets")
  actor = c.train["actor"]
  if c.has("reference"):
    ref = c.infer["reference"]
    if not ref.swap or ref.offload:
      raise ValueError(f"{_FW}: reference.infer.swap={int(ref.swap)}, offload={int(ref.offload)}: "
                       "slime keeps the reference's weights in pinned host memory and switches "
                       "them into the actor's model for its pass (tensor_backper.py); use swap 1, "
                       "offload 0")
  for phase in ("train", "infer"):
    lay = getattr(c, phase).get("critic")
    if lay is not None and (lay.swap, lay.offload) != (actor.swap, actor.offload):
      raise ValueError(f"{_FW}: critic.{phase}.swap={int(lay.swap)}, offload={int(lay.offload)} "
                       f"differ from the actor's ({int(actor.swap)}, {int(actor.offload)}); "
                       "slime gives the critic the actor's offload flags")


def slime_command(settings: dict) -> str:
  """``python3 train.py ...`` (or ``train_async.py``), quoted with :func:`shlex.join`."""
  return shlex.join(["python3", settings["script"], *settings["argv"]])


def as_run(plan: cm.Plan, **_) -> cm.Plan:
  """The plan as slime runs it: CUDA IPC colocated, NCCL buckets apart, the reference's
  weights in pinned host memory, the critic with the actor's offload flags."""
  a = plan.role("actor")
  same = {"swap": a.train.swap, "offload": a.train.offload} if a is not None else {}
  return with_layouts(plan, {"reference": {"swap": 1.0, "offload": 0.0}, "critic": same},
                      "ipc" if shares_rollout(plan) else "bucketed")


EXPORTER = Exporter(name=record.NAME, framework=record.FRAMEWORK, version=VERSION,
                    to_config=to_slime,
                    render_settings=slime_command, kind="command", adapt=as_run,
                    forces={
                        "engine.sync_backend": "CUDA IPC buckets with --colocate, NCCL "
                        "broadcasts of --update-weight-buffer-size buckets apart",
                        "reference.swap": "tensor_backper.py keeps the reference's weights in "
                        "pinned host memory and switches them into the actor's model",
                        "reference.offload": "tensor_backper.py switches the reference's "
                        "weights into the actor's model; none are streamed from the host",
                        "critic.swap": "the critic takes the actor's offload flags",
                        "critic.offload": "the critic takes the actor's offload flags"})
