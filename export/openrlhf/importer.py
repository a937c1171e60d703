"""Import of an OpenRLHF run: the argv of ``python3 -m openrlhf.cli.train_ppo_ray``.

Reads the flags of OpenRLHF v0.11.0 (3c3be62, ``openrlhf/cli/train_ppo_ray.py``)
that :func:`export.to_openrlhf` writes; a flag left out takes that parser's
default. Pools follow the colocation flags: ``--train.colocate_all`` in a
synchronous run puts every model and the vLLM engines on pool ``all``;
otherwise the actor is on ``train``, the engines on ``gen``, the reference on
``train`` with ``--train.colocate_actor_ref`` (else ``ref``), the critic on
``critic`` (``train`` with ``colocate_all``), the reward model on the
critic's pool with ``--train.colocate_critic_reward`` (else ``rm``). A critic
exists for ``gae`` (PPO), a reward model when ``--reward.model_name_or_path``
or ``--reward.num_nodes`` is given, a reference when ``--algo.kl.init_coef``
is not 0. ``--ds.adam_offload`` is the CPU optimizer (``offload``), ``--ds.enable_sleep``
the actor's and critic's ``swap``, ``--ref.offload`` / ``--reward.offload`` those models'
``offload``; weights reach the engines by CUDA IPC in a colocated synchronous run (``ipc``),
else by per-tensor NCCL broadcasts (``per_tensor``).

What the flags cannot state: the mean response length, the architecture
(a model path naming no preset), the accelerator, vLLM's ``max_num_seqs``
(OpenRLHF passes none; ``engine_max_seqs``), Megatron's sequence
parallelism (DeepSpeed has none), and the sharding and recompute of
inference-only models (one ``--ds.*`` for all: taken from the actor).
"""

from __future__ import annotations

from typing import Any

import costmodel as cm
from export._src import importing
from export._src import shell
from export._src.importing import number

FW = "OpenRLHF"
_ALGORITHM = {"gae": "ppo", "group_norm": "grpo", "reinforce": "reinforce_pp", "rloo": "rloo"}
# reinforce_baseline and dr_grpo of openrlhf/cli/train_ppo_ray.py @3c3be62: group baselines.
_ALIKE = {"reinforce_baseline": "reinforce_pp", "dr_grpo": "grpo"}
_NO_SP = ("sequence_parallel",)
UNEXPRESSED = {"actor.train": _NO_SP, "actor.infer": _NO_SP, "critic.train": _NO_SP,
               "critic.infer": _NO_SP + ("zero_stage", "recompute", "offload"),
               "reference.infer": _NO_SP + ("zero_stage", "recompute"),
               "reward.infer": _NO_SP + ("zero_stage", "recompute"), "engine": ("max_seqs",)}
_SWITCHES = frozenset({
    "--train.colocate_all", "--train.colocate_actor_ref", "--train.colocate_critic_reward",
    "--vllm.enable_prefix_caching", "--vllm.enable_sleep", "--ds.enable_sleep",
    "--ds.packing_samples", "--ds.adam_offload", "--vllm.enforce_eager",
    "--actor.gradient_checkpointing_enable", "--ref.offload", "--reward.offload",
    "--algo.dynamic_filtering_enable", "--train.async_enable", "--train.partial_rollout_enable",
    "--train.dynamic_batch_enable"})


def read_source(source: Any) -> dict[str, Any]:
  """Flags from a dict, an argv list, or a file holding the command (a shell script with
  ``\\`` continuations, ``$VAR`` left as written)."""
  if isinstance(source, dict):
    return dict(source)
  if isinstance(source, (list, tuple)):
    return importing.parse_argv(list(source), _SWITCHES)
  path, _ = importing.read_text(source, FW)
  _, words, _ = shell.command(path, lambda w: w == "openrlhf.cli.train_ppo_ray",
                              "'python3 -m openrlhf.cli.train_ppo_ray'")
  return importing.parse_argv(words, _SWITCHES)


def read(source: Any, **missing: Any) -> importing.Imported:
  """The job, plan and cluster of an OpenRLHF run (see the module docstring).

  Raises:
    ValueError: naming the flag and its value where the argv is not a run
      the cost model can read, or the keyword of a fact it lacks.
  """
  o = importing.Tracked(read_source(source))
  g = importing.given(FW, missing)
  notes: list[str] = []
  algorithm = importing.estimator(o, "algo.advantage.estimator", FW, _ALGORITHM, _ALIKE, "gae",
                                  notes)
  if o.get("algo.dynamic_filtering_enable"):
    if algorithm == "ppo":
      raise ValueError(f"{FW}: algo.dynamic_filtering_enable with algo.advantage.estimator="
                       "'gae': the cost model's DAPO is critic-free")
    if algorithm != "grpo":
      notes.append(f"algo.dynamic_filtering_enable with {algorithm}: costed as DAPO (the same "
                   "stages as group_norm with the filter)")
    algorithm = "dapo"
  actor = importing.model_spec(g.model, "model", o.get("actor.model_name_or_path"))
  prompts = number(o, "rollout.batch_size", FW, 1024)
  n = number(o, "rollout.n_samples_per_prompt", FW, 1)
  max_len = number(o, "data.max_len", FW, 2048)
  max_response = number(o, "rollout.max_new_tokens", FW, 1024)
  prompt_len = max_len - max_response
  if prompt_len < 1:
    raise ValueError(f"{FW}: data.max_len={max_len} must exceed rollout.max_new_tokens="
                     f"{max_response} (the prompt's share)")
  samples = prompts * n
  train_batch = number(o, "train.batch_size", FW, 128)
  if samples % train_batch:
    raise ValueError(f"{FW}: train.batch_size={train_batch} must divide rollout.batch_size x "
                     f"rollout.n_samples_per_prompt = {samples}")
  use_ref = float(number(o, "algo.kl.init_coef", FW, 0.01, kind=float, minimum=None)) != 0.0
  reward = "reward.model_name_or_path" in o or "reward.num_nodes" in o
  rank = number(o, "ds.lora.rank", FW, 0, minimum=0)
  job = importing.build_job(FW, g, algorithm, actor, prompts, n, prompt_len, max_response,
                            samples // train_batch, number(o, "train.max_epochs", FW, 1), use_ref,
                            reward, cm.LoRA(rank=float(rank), shared_reference=False)
                            if rank else None, o.get("reward.model_name_or_path"))
  seq = prompt_len + float(g.response_mean)

  train = cm.Parallel(
      tp=float(number(o, "ds.tensor_parallel_size", FW, 1)),
      cp=float(number(o, "ds.ring_attn_size", FW, 1)),
      zero_stage=float(number(o, "ds.zero_stage", FW, 2, minimum=0)),
      offload=1.0 if o.get("ds.adam_offload") else 0.0,
      swap=1.0 if o.get("ds.enable_sleep") else 0.0,
      recompute=2.0 if o.get("actor.gradient_checkpointing_enable") else 0.0,
      micro_batch=_micro(o, "train", seq))
  infer = train.replace(micro_batch=_micro(o, "rollout", seq))
  staleness = number(o, "train.async_queue_size", FW, 1) if o.get("train.async_enable") else 0
  mode = cm.Mode(staleness=staleness, partial_rollout=bool(o.get("train.partial_rollout_enable")))
  colocate_all = bool(o.get("train.colocate_all"))
  shared = colocate_all and staleness == 0

  def group(key):
    return (number(o, f"{key}.num_nodes", FW, 1), number(o, f"{key}.num_gpus_per_node", FW, 8))

  groups = {"train": group("actor")}
  roles = [cm.RolePlan("actor", "train", train=train, infer=infer)]
  if use_ref:
    pool = "train" if colocate_all or o.get("train.colocate_actor_ref") else "ref"
    groups.setdefault(pool, group("ref"))
    roles.append(cm.RolePlan("reference", pool, infer=infer.replace(
        offload=1.0 if o.get("ref.offload") else 0.0, swap=0.0)))
  critic_pool = "train" if colocate_all else "critic"
  if algorithm == "ppo":
    groups.setdefault(critic_pool, group("critic"))
    roles.append(cm.RolePlan("critic", critic_pool, train=train, infer=infer))
  if reward:
    pool = ("train" if colocate_all else
            critic_pool if o.get("train.colocate_critic_reward") and algorithm == "ppo" else "rm")
    groups.setdefault(pool, group("reward"))
    roles.append(cm.RolePlan("reward", pool, infer=infer.replace(
        offload=1.0 if o.get("reward.offload") else 0.0, swap=0.0)))
  tp = number(o, "vllm.tensor_parallel_size", FW, 1)
  engines = number(o, "vllm.num_engines", FW)
  if shared:
    roles = [cm.RolePlan(r.role, "all", train=r.train, infer=r.infer) for r in roles]
    pools = [cm.Pool("all", float(groups["train"][0] * groups["train"][1]))]
    rollout_pool = "all"
    if engines * tp != pools[0].gpus:
      raise ValueError(f"{FW}: train.colocate_all: vllm.num_engines x vllm.tensor_parallel_size "
                       f"= {engines} x {tp} must equal the actor's {int(pools[0].gpus)} GPUs")
    gen = 0
  else:
    pools = [cm.Pool("gen", float(engines * tp))]
    pools += [cm.Pool(name, float(nn * p)) for name, (nn, p) in groups.items()]
    rollout_pool = "gen"
    gen = engines * tp
  engine = cm.Engine(tp=float(tp), memory_fraction=float(number(
      o, "vllm.gpu_memory_utilization", FW, 0.95, kind=float, minimum=0)),
      max_seqs=float(g.engine_max_seqs), prefix_caching=bool(o.get("vllm.enable_prefix_caching")),
      cuda_graphs=not o.get("vllm.enforce_eager"), sync_backend="ipc" if shared else "per_tensor")
  plan = cm.Plan(pools=tuple(pools), roles=tuple(roles), engine=engine, rollout_pool=rollout_pool,
                 mode=mode)
  cluster = importing.build_cluster(g, list(groups.values()), gen)
  cm.validate_plan(job, plan, cluster)
  return importing.imported(job, plan, cluster, o, _RELEVANT, tuple(notes))


# Flags a cost could depend on: set but read by no rule above, they are listed as not modelled.
_RELEVANT = (r"num_nodes|num_gpus_per_node|num_engines|parallel_size|ring_attn|zero_stage|"
             r"offload|sleep|micro_batch|max_tokens|dynamic_batch|lora\.rank|"
             r"gpu_memory_utilization|enforce_eager|colocate|async|partial_rollout|"
             r"gradient_checkpointing|packing")


def _micro(o: dict, phase: str, seq: float) -> float:
  """``--{phase}.micro_batch_size``, or with ``--train.dynamic_batch_enable`` the samples that
  fill ``--{phase}.max_tokens_per_gpu`` (rollout's defaults to train's, as the parser sets)."""
  if o.get("train.dynamic_batch_enable"):
    key = f"{phase}.max_tokens_per_gpu"
    key = key if o.get(key) is not None else "train.max_tokens_per_gpu"
    return float(max(1, int(number(o, key, FW, 16192) // seq)))
  return float(number(o, f"{phase}.micro_batch_size", FW, 1))
