"""The table of rules that decide whether a plan exists (see
:mod:`costmodel._src.specs.constraints` for its readings).

Each rule is built from primitives with an exact and a relaxed measure:
``a`` divides ``b`` (exact ``|b mod a| / a``, relaxed ``relu(log2 a - log2 b)``),
``a <= b``, ``a`` is an integer, ``a == 1``.

The expert-parallel rule (Megatron-Core "MoE parallel folding"): expert ranks
``ep x etp`` are carved out of the ``tp x cp x dp`` ranks of one pipeline
stage, so ``ep * etp`` must divide ``tp * cp * dp = pool / pp``
(NVIDIA/Megatron-LM, megatron/core/parallel_state.py, ``initialize_model_parallel``
raises unless the world size is divisible by ``expert_tensor_parallel_size *
expert_model_parallel_size * pipeline_model_parallel_size``; commit
934c8260ada361db9b155d504c5b20600731d773). ``etp`` is the layout's expert-tensor
parallel degree (``Parallel.etp``, default 1); without EP (``ep = 1``) the
experts follow TP and the rule has nothing to check. A vLLM engine with
``enable_expert_parallel`` sets ``EP = DP x PCP x TP`` of the engine and expert
TP 1 (vllm-project/vllm, vllm/model_executor/layers/fused_moe/config.py,
``FusedMoEParallelConfig.make``; commit 00c1c6a2054b7027369c2a460cc2181a9b86293d);
one engine replica here has DP = PCP = 1, so its ``ep`` is 1 or its ``tp``.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
from typing import Any

Fields = Mapping[str, Any]
_EPS = 1e-6


def _relu(xp, x):
  return xp.maximum(x, 0.0)


def _lg(xp, x):
  return xp.log2(xp.maximum(x, _EPS))


def _divides(xp, a, b, exact: bool):
  """``a`` divides ``b`` (``a >= 1``); relaxed: ``a <= b`` in log2 units."""
  if exact:
    a = xp.maximum(a, 1.0)
    return xp.abs(xp.mod(b, a)) / a
  return _relu(xp, _lg(xp, a) - _lg(xp, b))


def _at_most(xp, a, b, exact: bool):
  """``a <= b``; relaxed in log2 units."""
  if exact:
    return _relu(xp, a - b)
  return _relu(xp, _lg(xp, a) - _lg(xp, b))


def _integer(xp, a, exact: bool):
  """``a`` is an integer; relaxed values need not be."""
  if exact:
    return xp.abs(a - xp.round(a))
  return xp.zeros_like(a)


def _is_one(xp, a, exact: bool):
  """``a == 1`` (for degrees >= 1); relaxed: ``log2 a <= 0``."""
  if exact:
    return xp.abs(a - 1.0)
  return _relu(xp, _lg(xp, a))


def _when(xp, cond, measure):
  return xp.where(cond, measure, 0.0)


@dataclasses.dataclass(frozen=True)
class Rule:
  """One rule of the table.

  Attributes:
    name: Short identifier, unique in the table.
    scope: The fields it reads (``layout``, ``engine``, ``pool``, ``pools``,
      ``mode``, ``placement``, ``schedule``).
    rule_set: ``core`` (always applies) or the name of an optional set.
    measure: ``(fields, xp, exact) -> array``: 0 where the rule holds, > 0
      where it does not.
    message: ``fields -> str``: what is wrong, naming field, value and rule
      (values are Python floats).
    source: Where a framework states the rule (optional sets).
  """

  name: str
  scope: str
  rule_set: str
  measure: Callable[[Fields, Any, bool], Any]
  message: Callable[[Fields], str]
  source: str = ""


def _degree_rules(scope: str, names: Sequence[str]) -> list[Rule]:
  return [Rule(f"{scope}_{n}_integer", scope, "core",
               lambda f, xp, ex, n=n: _integer(xp, f[n], ex),
               lambda f, n=n: f"{n}={f[n]:g} must be an integer") for n in names]


def _gqa(f, xp, exact):
  tp, kv = f["tp"], f["n_kv_heads"]
  if exact:
    m = xp.minimum(_divides(xp, tp, kv, True), _divides(xp, kv, tp, True))
  else:
    m = xp.zeros_like(tp * kv)
  return _when(xp, f["mla"] < 0.5, m)


def _ep_fold(f, xp, exact):
  # Expert ranks ep x etp fold into the tp x cp x dp ranks of a pipeline stage.
  ranks = f["gpus"] / xp.maximum(f["pp"], 1.0)
  return _when(xp, f["ep"] > 1, _divides(xp, f["ep"] * f["etp"], ranks, exact))


def _ep_fold_message(f):
  etp = "" if f["etp"] == 1 else f" x etp={f['etp']:g}"
  return (f"ep={f['ep']:g}{etp} must divide tp*dp*cp={f['gpus'] / f['pp']:g} (expert ranks "
          f"ep x etp={f['etp']:g} come from the TP, DP and CP ranks of a pipeline stage)")


def _vpp_needs_pp(f, xp, exact):
  # Interleaving needs a pipeline; at pp = 1 the model has no bubble for vpp to
  # shorten, so a relaxed start with vpp > 1 is left to rounding.
  if exact:
    return _when(xp, f["vpp"] > 1, _at_most(xp, 2.0, f["pp"], True))
  return xp.zeros_like(f["vpp"] * f["pp"])


def _engine_ep(f, xp, exact):
  ep, tp = f["ep"], f["tp"]
  if exact:
    m = xp.where(f["moe"] > 0.5, xp.minimum(xp.abs(ep - 1.0), xp.abs(ep - tp)), xp.abs(ep - 1.0))
  else:
    m = xp.zeros_like(ep * tp)
  return m


def _dp(f, xp):
  return f["gpus"] / xp.maximum(f["tp"] * f["pp"] * f["cp"], 1.0)


def _batch_rule(name: str, set_name: str, source: str, per_gpus: bool,
                with_micro: bool = True) -> Rule:
  """A training batch that must split evenly: the mini-batch over data-parallel
  ranks x micro-batch (``with_micro=False``: over the data-parallel ranks), or
  (``per_gpus``) the step's samples over the pool."""
  if per_gpus:
    def measure(f, xp, exact):
      return _when(xp, f["trained"] > 0.5, _divides(xp, f["gpus"], f["samples"], exact))

    def message(f):
      return (f"samples_per_step={f['samples']:g} must divide over the pool's {f['gpus']:g} "
              f"GPUs ({source})")
  else:
    def measure(f, xp, exact):
      unit = _dp(f, xp) * (f["micro_batch"] if with_micro else 1.0)
      return _when(xp, f["trained"] > 0.5, _divides(xp, unit, f["mini_batch_samples"], exact))

    def message(f):
      dp = f["gpus"] / (f["tp"] * f["pp"] * f["cp"])
      micro = f" x micro_batch={f['micro_batch']:g}" if with_micro else ""
      return (f"samples_per_step/mini_batches={f['mini_batch_samples']:g} must divide over "
              f"dp={dp:g}{micro} ({source})")
  return Rule(name, "layout", set_name, measure, message, source)


_VERL = ("veRL: verl/workers/engine_workers.py @1dda039 (mini_batch_size // the data-parallel "
         "size), ppo_mini_batch_size over dp ranks")
_VERL_STEP = "veRL: verl/trainer/ppo/ray_trainer.py, train batch x rollout.n over trainer GPUs"
_OPENRLHF = ("OpenRLHF: openrlhf/utils/deepspeed/deepspeed.py @3c3be62 (accumulated_gradient), "
             "train_batch_size")
_NEMO_RL = ("NeMo-RL: nemo_rl/models/policy/lm_policy.py @7ea279a (train shards the "
            "batch over the data-parallel size), train_global_batch_size")
_SLIME = ("slime: THUDM/slime@624b824 trains with Megatron-LM, whose global batch must divide "
          "over micro_batch x data-parallel ranks (--global-batch-size, --micro-batch-size)")
_AREAL = ("AReaL: inclusionAI/AReaL@4aef98d, a mini-batch (ppo_n_minibatches) splits over the "
          "data-parallel ranks and mb_spec.n_mbs micro-batches")
_INTERLEAVE = ("Megatron-LM: megatron/training/arguments.py @307dcf37 (validate_args): with "
               "interleaving, num_layers divides over pipeline_model_parallel_size and each "
               "stage's layers over the virtual stages; uneven splits need "
               "--pipeline-model-parallel-layout, which no exporter here writes")
_MAMBA = ("Megatron-Core: megatron/core/ssm/mamba_mixer.py @00bebb45 (MambaMixer.__init__) "
          "asserts that ngroups, and so the heads, divide over the tensor-parallel ranks")
_BATCH = ("every framework above splits each mini-batch evenly over the data-parallel ranks "
          "of the training pool")

RULES: tuple[Rule, ...] = tuple(
    _degree_rules("layout", ("tp", "pp", "cp", "ep", "etp", "vpp")) + [
        Rule("layout_divides_pool", "layout", "core",
             lambda f, xp, ex: _divides(xp, f["tp"] * f["pp"] * f["cp"], f["gpus"], ex),
             lambda f: (f"tp*pp*cp={f['tp'] * f['pp'] * f['cp']:g} must divide the pool's "
                        f"{f['gpus']:g} GPUs")),
        Rule("tp_divides_heads", "layout", "core",
             lambda f, xp, ex: _divides(xp, f["tp"], f["n_heads"], ex),
             lambda f: f"tp={f['tp']:g} must divide n_heads={f['n_heads']:g}"),
        Rule("tp_kv_heads", "layout", "core", _gqa,
             lambda f: (f"tp={f['tp']:g} and n_kv_heads={f['n_kv_heads']:g} must divide one "
                        "another")),
        Rule("tp_divides_mamba_groups", "layout", "core",
             lambda f, xp, ex: _when(xp, f.get("mamba_groups", 0.0) > 0.5, _divides(
                 xp, f["tp"], xp.maximum(f.get("mamba_groups", 1.0), 1.0), ex)),
             lambda f: (f"tp={f['tp']:g} must divide the Mamba layers' "
                        f"mamba_groups={f.get('mamba_groups', 0.0):g}"), _MAMBA),
        Rule("pp_within_layers", "layout", "core",
             lambda f, xp, ex: _at_most(xp, f["pp"], f["n_layers"], ex),
             lambda f: f"pp={f['pp']:g} exceeds n_layers={f['n_layers']:g}"),
        Rule("ep_needs_moe", "layout", "core",
             lambda f, xp, ex: _when(xp, f["moe"] < 0.5, _is_one(xp, f["ep"], ex)),
             lambda f: f"ep={f['ep']:g} needs an MoE model"),
        Rule("ep_divides_experts", "layout", "core",
             lambda f, xp, ex: _when(xp, f["moe"] > 0.5, _divides(
                 xp, f["ep"], xp.maximum(f["n_experts"], 1.0), ex)),
             lambda f: f"ep={f['ep']:g} must divide n_experts={f['n_experts']:g}"),
        Rule("ep_folds_into_stage", "layout", "core", _ep_fold, _ep_fold_message),
        Rule("vpp_needs_pp", "layout", "core", _vpp_needs_pp,
             lambda f: f"vpp={f['vpp']:g} > 1 needs pp > 1 (pp={f['pp']:g})"),
        Rule("vpp_divides_layers", "layout", "interleave",
             lambda f, xp, ex: _when(xp, f["vpp"] > 1, _divides(
                 xp, f["pp"] * f["vpp"], f["n_layers"], ex)),
             lambda f: (f"pp*vpp={f['pp'] * f['vpp']:g} must divide n_layers={f['n_layers']:g} "
                        "(each GPU holds vpp equal chunks of its stage)"), _INTERLEAVE),
        Rule("zero3_alone", "layout", "zero3",
             lambda f, xp, ex: _when(xp, f["zero"] == 3, _is_one(xp, f["tp"], ex)
                                     + _is_one(xp, f["pp"], ex) + _is_one(xp, f["ep"], ex)),
             lambda f: (f"zero_stage=3 with tp={f['tp']:g}, pp={f['pp']:g}, ep={f['ep']:g}: "
                        "ZeRO-3 shards over data-parallel ranks only (tp = pp = ep = 1)")),
        _batch_rule("verl_step_over_gpus", "verl", _VERL_STEP, per_gpus=True),
        _batch_rule("verl_mini_batch", "verl", _VERL, per_gpus=False),
        _batch_rule("openrlhf_train_batch", "openrlhf", _OPENRLHF, per_gpus=False),
        _batch_rule("nemo_rl_global_batch", "nemo_rl", _NEMO_RL, per_gpus=False),
        _batch_rule("slime_global_batch", "slime", _SLIME, per_gpus=False),
        _batch_rule("areal_mini_batch", "areal", _AREAL, per_gpus=False),
        _batch_rule("dp_divides_mini_batch", "batch", _BATCH, per_gpus=False, with_micro=False),
    ] + _degree_rules("engine", ("tp", "pp", "ep")) + [
        Rule("engine_divides_pool", "engine", "core",
             lambda f, xp, ex: _divides(xp, f["tp"] * f["pp"], f["gpus"], ex),
             lambda f: (f"engine tp*pp={f['tp'] * f['pp']:g} must divide the rollout pool's "
                        f"{f['gpus']:g} GPUs")),
        # data-parallel attention keeps whole heads on each GPU (Engine.dp_attention)
        Rule("engine_tp_divides_heads", "engine", "core",
             lambda f, xp, ex: _when(xp, f.get("dp_attention", 0.0) < 0.5,
                                     _divides(xp, f["tp"], f["n_heads"], ex)),
             lambda f: f"engine tp={f['tp']:g} must divide n_heads={f['n_heads']:g}"),
        Rule("engine_pp_within_layers", "engine", "core",
             lambda f, xp, ex: _at_most(xp, f["pp"], f["n_layers"], ex),
             lambda f: f"engine pp={f['pp']:g} exceeds n_layers={f['n_layers']:g}"),
        Rule("engine_ep", "engine", "core", _engine_ep,
             lambda f: f"engine ep={f['ep']:g} must be 1 or equal tp={f['tp']:g} on an MoE model"),
        Rule("pool_positive_integer", "pool", "core",
             lambda f, xp, ex: (_at_most(xp, 1.0, f["gpus"], ex)
                                + _integer(xp, f["gpus"], ex)),
             lambda f: f"gpus={f['gpus']:g} must be a positive integer"),
        Rule("pools_within_cluster", "pools", "core",
             lambda f, xp, ex: _at_most(xp, f["total"], f["cluster_gpus"], ex),
             lambda f: (f"pools hold {f['total']:g} GPUs, more than the cluster's "
                        f"{f['cluster_gpus']:g}")),
        Rule("partial_needs_staleness", "mode", "core",
             lambda f, xp, ex: f["partial"] * (f["staleness"] < 1),
             lambda f: "partial_rollout=True needs staleness >= 1 (asynchronous)"),
        Rule("threshold_needs_staleness", "mode", "core",
             lambda f, xp, ex: (1.0 - xp.isnan(f.get("threshold", xp.nan))) * (
                 f["staleness"] < 1),
             lambda f: (f"staleness_threshold={f['threshold']:g} needs staleness >= 1 "
                        "(asynchronous)")),
        Rule("staleness_apart", "placement", "core",
             lambda f, xp, ex: f["actor_on_rollout"] * (f["staleness"] > 0),
             lambda f: (f"staleness={f['staleness']:g} needs the rollout pool "
                        f"{f.get('rollout_pool', '')!r} apart from the actor's training pool")),
        Rule("fuse_training_critic", "placement", "core",
             lambda f, xp, ex: f["fuse_training"] * (1.0 - f["critic_on_actor_pool"]),
             lambda f: "fuse_training=True needs a critic on the actor's pool"),
        Rule("ipc_colocated", "placement", "core",
             lambda f, xp, ex: f["sync_ipc"] * (1.0 - f["actor_on_rollout"]),
             lambda f: ("engine sync_backend='ipc' needs the actor's training on the rollout "
                        f"pool {f.get('rollout_pool', '')!r} (CUDA IPC is within one GPU)")),
        Rule("reshard_apart", "placement", "core",
             lambda f, xp, ex: f["sync_reshard"] * f["actor_on_rollout"],
             lambda f: ("engine sync_backend='reshard' needs the rollout pool "
                        f"{f.get('rollout_pool', '')!r} apart from the actor's training pool "
                        "(use 'ipc' or 'per_tensor' when colocated)")),
        Rule("streaming_apart", "placement", "core",
             lambda f, xp, ex: (f["require_batches"] > 0) * f["actor_on_rollout"],
             lambda f: (f"require_batches={f['require_batches']:g} (streaming) needs the rollout "
                        f"pool {f.get('rollout_pool', '')!r} apart from the actor's training "
                        "pool")),
        Rule("require_batches_divide", "schedule", "core",
             lambda f, xp, ex: _when(xp, f["require_batches"] > 0, _divides(
                 xp, f["require_batches"], f["mini_batches"], ex)),
             lambda f: (f"require_batches={f['require_batches']:g} must divide the job's "
                        f"mini_batches={f['mini_batches']:g}")),
    ])

RULE_SETS: tuple[str, ...] = ("zero3", "batch", "verl", "openrlhf", "nemo_rl", "slime", "areal",
                              "interleave")
