"""Bad input through the import API and the command lines: a ValueError naming the
field and the value (API); one line on stderr naming them, exit status 2 and no
traceback, before any search (command line)."""

from __future__ import annotations

import json
import os

import pytest

import export

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "tests", "data", "verl_examples", "run_qwen3_8b_fsdp_1dda039.txt")

VERL = ["algorithm.adv_estimator=grpo", "data.train_batch_size=128", "data.max_prompt_length=512",
        "data.max_response_length=1024", "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=4", "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]
OPENRLHF = ["--actor.model_name_or_path", "Qwen/Qwen2.5-1.5B",
            "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "4", "--vllm.num_engines", "2",
            "--vllm.tensor_parallel_size", "2", "--rollout.batch_size", "64",
            "--rollout.n_samples_per_prompt", "4", "--train.batch_size", "64",
            "--data.max_len", "2048", "--rollout.max_new_tokens", "1024",
            "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0"]
NEMO = {"grpo": {"num_prompts_per_step": 32, "num_generations_per_prompt": 4},
        "loss_fn": {"reference_policy_kl_penalty": 0},
        "cluster": {"num_nodes": 1, "gpus_per_node": 8},
        "policy": {"model_name": "Qwen/Qwen2.5-1.5B", "train_global_batch_size": 64,
                   "train_micro_batch_size": 2, "logprob_batch_size": 2,
                   "max_total_sequence_length": 2048,
                   "dtensor_cfg": {"enabled": True, "tensor_parallel_size": 1,
                                   "context_parallel_size": 1},
                   "megatron_cfg": {"enabled": False},
                   "generation": {"max_new_tokens": 1024, "colocated": {"enabled": True},
                                  "vllm_cfg": {"tensor_parallel_size": 1,
                                               "gpu_memory_utilization": 0.6}}}}


def _verl(*changes, drop=()):
  keys = {w.split("=", 1)[0]: w for w in VERL}
  for c in changes:
    keys[c.split("=", 1)[0]] = c
  return [w for k, w in keys.items() if k not in drop]


def _openrlhf(**changes):
  argv = list(OPENRLHF)
  for k, v in changes.items():
    flag = "--" + k.replace("__", ".")
    if flag in argv:
      argv[argv.index(flag) + 1] = v
    else:
      argv += [flag, v]
  return argv


def _nemo(path, value):
  cfg = json.loads(json.dumps(NEMO))
  *head, last = path.split(".")
  d = cfg
  for h in head:
    d = d.setdefault(h, {})
  if value is None:
    d.pop(last, None)
  else:
    d[last] = value
  return cfg


def _script(tmp_path, text):
  p = tmp_path / "run.sh"
  p.write_text(text)
  return str(p)


OK = dict(response_mean=500.0)

# (id, framework, source (or a function of tmp_path), keywords, strings the message names)
API_CASES = [
    ("framework", "torchrl", VERL, OK, ["framework='torchrl'"]),
    ("no response_mean", "verl", VERL, {}, ["response_mean", "max_response=1024"]),
    ("response_mean above max", "verl", VERL, dict(response_mean=5000.0),
     ["response_mean=5000.0", "max_response=1024"]),
    ("unknown keyword", "verl", VERL, dict(OK, mean_len=5), ["mean_len"]),
    ("model path names no preset", "verl",
     _verl("actor_rollout_ref.model.path=org/mystery-7b"), OK, ["model", "'org/mystery-7b'"]),
    ("model preset", "verl", VERL, dict(OK, model="gpt-9"), ["model='gpt-9'"]),
    ("adv_estimator", "verl", _verl("algorithm.adv_estimator=policy_magic"), OK,
     ["algorithm.adv_estimator='policy_magic'"]),
    ("train_batch_size type", "verl", _verl("data.train_batch_size=lots"), OK,
     ["data.train_batch_size='lots'", "integer"]),
    ("train_batch_size multiple", "verl", _verl("data.train_batch_size=100"), OK,
     ["data.train_batch_size=100", "ppo_mini_batch_size=32"]),
    ("bool", "verl", _verl("actor_rollout_ref.actor.use_kl_loss=maybe"), OK,
     ["actor_rollout_ref.actor.use_kl_loss='maybe'"]),
    ("rollout name", "verl", _verl("actor_rollout_ref.rollout.name=hf"), OK,
     ["actor_rollout_ref.rollout.name='hf'"]),
    ("strategy", "verl", _verl("actor_rollout_ref.actor.strategy=deepspeed"), OK,
     ["actor_rollout_ref.actor.strategy='deepspeed'"]),
    ("trainer mode", "verl", _verl("trainer.v1.trainer_mode=colocate_async"), OK,
     ["trainer.v1.trainer_mode='colocate_async'"]),
    ("reward model architecture", "verl", _verl("reward.reward_model.enable=True"), OK,
     ["reward_model"]),
    ("staleness", "verl", _verl("async_training.staleness_threshold=-1", "rollout.nnodes=1",
                                "rollout.n_gpus_per_node=8"), OK,
     ["async_training.staleness_threshold=-1", ">= 0"]),
    ("no micro-batch", "verl",
     _verl(drop=("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",)), OK,
     ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "use_dynamic_bsz"]),
    ("rollout tp", "verl", _verl("actor_rollout_ref.rollout.tensor_model_parallel_size=3"), OK,
     ["engine tp*pp=3", "8 GPUs"]),
    ("missing file", "verl", "/nonexistent/run.sh", OK, ["source='/nonexistent/run.sh'"]),
    ("script without command", "verl", lambda t: _script(t, "echo hello\n"), OK,
     ["python3 -m verl"]),
    ("script variable", "verl",
     lambda t: _script(t, "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path="
                        "Qwen/Qwen2.5-7B data.train_batch_size=$BS\n"), OK,
     ["data.train_batch_size='${BS}'", "does not assign"]),
    ("openrlhf estimator", "openrlhf", _openrlhf(algo__advantage__estimator="nonsense"), OK,
     ["algo.advantage.estimator='nonsense'"]),
    ("openrlhf max_len", "openrlhf", _openrlhf(data__max_len="1000"), OK,
     ["data.max_len=1000", "rollout.max_new_tokens=1024"]),
    ("openrlhf train batch", "openrlhf", _openrlhf(train__batch_size="100"), OK,
     ["train.batch_size=100", "256"]),
    ("openrlhf colocate_all", "openrlhf", _openrlhf(vllm__num_engines="4") + [
        "--train.colocate_all"], OK, ["vllm.num_engines", "4 x 2", "4 GPUs"]),
    ("openrlhf integer", "openrlhf", _openrlhf(vllm__num_engines="two"), OK,
     ["vllm.num_engines='two'"]),
    ("nemo algorithm", "nemo_rl", _nemo("grpo", None), OK, ["num_prompts_per_step"]),
    ("nemo recompute", "nemo_rl", _nemo("policy.megatron_cfg", {
        "enabled": True, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1, "activation_checkpointing": True,
        "recompute_granularity": "partial"}), OK, ["recompute_granularity='partial'"]),
    ("nemo no backend", "nemo_rl", _nemo("policy.dtensor_cfg.enabled", False), OK,
     ["policy.dtensor_cfg.enabled", "policy.megatron_cfg.enabled"]),
    ("nemo sequence length", "nemo_rl", _nemo("policy.max_total_sequence_length", 0), OK,
     ["policy.max_total_sequence_length=0", ">= 1"]),
    ("nemo yaml", "nemo_rl", lambda t: _script(t, "- a\n- b\n"), OK, ["not a YAML mapping"]),
    ("slime estimator", "slime", ["python3", "train.py", "--hf-checkpoint", "/ckpt/Qwen2.5-7B",
                                  "--advantage-estimator", "nonsense",
                                  "--rollout-batch-size", "8"], OK,
     ["advantage-estimator='nonsense'"]),
    ("slime batch", "slime", ["python3", "train.py", "--hf-checkpoint", "/ckpt/Qwen2.5-7B",
                              "--rollout-batch-size", "8",
                              "--n-samples-per-prompt", "4", "--global-batch-size", "5"], OK,
     ["global-batch-size=5", "32"]),
    ("areal backend", "areal", {"train_dataset": {"batch_size": 8, "max_length": 512},
                                "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
                                "actor": {"backend": "deepspeed:d8", "path": "Qwen/Qwen2.5-7B"},
                                "rollout": {"backend": "sglang:d4t2"}},
     OK, ["actor.backend='deepspeed:d8'", "alloc_mode.py"]),
]


@pytest.mark.parametrize("case", API_CASES, ids=[c[0] for c in API_CASES])
def test_import_api_names_the_field_and_value(case, tmp_path):
  _, framework, source, kw, names = case
  if callable(source):
    source = source(tmp_path)
  with pytest.raises(ValueError) as info:
    export.read_config(framework, source, **kw)
  for n in names:
    assert n in str(info.value), f"{n!r} not in {info.value}"


# ----- the command lines --------------------------------------------------------------------


def _call(command, args, cwd, monkeypatch, capsys):
  """The command run in this process from ``cwd``: (exit status, stdout, stderr)."""
  import search.estimate_cli  # pylint: disable=g-import-not-at-top
  import search.plan  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(cwd)
  code = {"estimate": search.estimate_cli, "plan": search.plan}[command].call(args)
  out, err = capsys.readouterr()
  return code, out, err


def _files(tmp_path):
  (tmp_path / "bad.json").write_text("{not json")
  (tmp_path / "old.json").write_text(json.dumps({"pools": {"all": 8}}))
  bad = _verl("algorithm.adv_estimator=policy_magic")
  (tmp_path / "bad_verl.txt").write_text("\n".join(bad))
  (tmp_path / "zero_batch.txt").write_text("\n".join(_verl("data.train_batch_size=0")))


E = "estimate"
P = "plan"
FROM = ["--from_verl", EXAMPLE, "--response_mean", "900"]
# (name, command, argv, the start of the error after the program name, words it holds)
CLI_CASES = [
    ("no input", E, [], "--plan:", ["--from_verl"]),
    ("plan file missing", E, ["--plan", "missing.json"], "--plan:", ["'missing.json'"]),
    ("plan not json", E, ["--plan", "bad.json"], "--plan:", ["bad.json", "not JSON"]),
    ("plan format", E, ["--plan", "old.json"], "--plan:", ["format=None"]),
    ("plan and import", E, ["--plan", "old.json", *FROM], "--plan:", ["--from_verl"]),
    ("import file missing", E, ["--from_verl", "nope.sh", "--response_mean", "900"],
     "--from_verl:", ["'nope.sh'"]),
    ("no response_mean", E, ["--from_verl", EXAMPLE], "--from_verl:", ["response_mean"]),
    ("two imports", E, [*FROM, "--from_nemo_rl", EXAMPLE], "--from_nemo_rl:", ["--from_verl"]),
    ("bad override", E, ["--from_verl", "bad_verl.txt", "--response_mean", "500"],
     "--from_verl:", ["algorithm.adv_estimator='policy_magic'"]),
    ("zero batch", E, ["--from_verl", "zero_batch.txt", "--response_mean", "500"],
     "--from_verl:", ["train_batch_size"]),
    ("export name", E, [*FROM, "--export", "torch", "--out", "p.json"], "--export:", ["'torch'"]),
    ("export without out", E, [*FROM, "--export", "verl"], "--export:", ["--out"]),
    ("out folder missing", E, [*FROM, "--out", "no/such/dir/p.json"], "--out:",
     ["'no/such/dir/p.json'", "does not exist"]),
    ("out folder is a file", E, [*FROM, "--out", "bad.json/p.json"], "--out:",
     ["bad.json", "not a folder"]),
    ("report folder missing", E, [*FROM, "--report", "nowhere/r.html"], "--report:",
     ["'nowhere/r.html'"]),
    ("float flag", E, ["--from_verl", EXAMPLE, "--response_mean", "long"], "--response_mean:",
     ["'long' is not a number"]),
    ("unknown flag", E, [*FROM, "--respones_mean", "900"], "--respones_mean:",
     ["no such flag", "--response_mean"]),
    ("positional", E, [*FROM, "extra"], "unexpected argument", ["'extra'"]),
    ("response_mean too long", E, ["--from_verl", EXAMPLE, "--response_mean", "99999"],
     "--from_verl:", ["response_mean=99999"]),
    ("gpu", E, [*FROM, "--gpu", "XYZ"], "--from_verl:", ["XYZ"]),
    ("prompt_len fraction", E, [*FROM, "--prompt_len", "300.5"], "--prompt_len:",
     ["'300.5' is not a whole number"]),
    ("plan out folder", P, ["--out", "no/such/dir/p.json"], "--out:", ["'no/such/dir/p.json'"]),
    ("plan nodes", P, ["--nodes", "many"], "--nodes:", ["'many' is not a whole number"]),
    ("plan nodes zero", P, ["--nodes", "0"], "--nodes:", ["0"]),
    ("plan prompts fraction", P, ["--prompts", "1.5"], "--prompts:", ["'1.5'"]),
    ("plan positional", P, ["plan.json"], "unexpected argument", ["'plan.json'"]),
    ("plan ppo_epochs", P, ["--ppo_epochs", "0"], "--ppo_epochs:", ["0"]),
    ("plan mini_batches", P, ["--mini_batches", "1.5"], "--mini_batches:", ["'1.5'"]),
    ("plan critic", P, ["--critic_model", "qwen2.5-1.5b"], "--critic_model:", ["'grpo'"]),
    ("plan model", P, ["--model", "gpt-9"], "--model:", ["'gpt-9'"]),
    ("plan gpu", P, ["--gpu", "V100X"], "--gpu:", ["'V100X'"]),
    ("plan algorithm", P, ["--algorithm", "sft"], "--algorithm:", ["'sft'"]),
    ("plan family", P, ["--families", "nonsense"], "--families:",
     ["'nonsense' is not one of colocated, split"]),
    ("plan family outside framework", P, ["--families", "split_async"], "--families:",
     ["--max_staleness=0"]),
    ("plan response lengths", P, ["--response_mean", "9000"], "--response_mean:",
     ["--response_max=8192"]),
    ("plan partial rollout", P, ["--partial_rollout"], "--partial_rollout:",
     ["--max_staleness >= 1"]),
    ("plan import", P, ["--from_verl", "bad_verl.txt", "--response_mean", "500"],
     "--from_verl:", ["algorithm.adv_estimator='policy_magic'"]),
    ("plan export", P, ["--export", "deepspeed", "--out", "p.json"], "--export:",
     ["'deepspeed'"]),
    ("plan relaxed", P, ["--relaxed", "maybe"], "--relaxed:", ["'maybe'"]),
    ("plan rollout_precision", P, ["--rollout_precision", "bf16,int4"], "--rollout_precision:",
     ["'int4'"]),
    ("plan lora_rank fraction", P, ["--lora_rank", "0.5"], "--lora_rank:", ["'0.5'"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_command_line_bad_input_is_one_line_and_exit_2(case, tmp_path, monkeypatch, capsys):
  _, command, args, head, names = case
  _files(tmp_path)
  code, out, err = _call(command, args, tmp_path, monkeypatch, capsys)
  assert code == 2, (code, err[-2000:])
  assert "Traceback" not in err + out
  lines = [s for s in err.splitlines() if s.strip()]
  assert len(lines) == 1, err
  assert lines[0].startswith(f"rlcost-{command}: {head}"), lines[0]
  for n in names:
    assert n in lines[0], f"{n!r} not in {lines[0]}"
  assert out == ""  # rejected before any work
  assert not (tmp_path / "p.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_unwritable_out_folder(tmp_path, monkeypatch, capsys):
  ro = tmp_path / "ro"
  ro.mkdir()
  ro.chmod(0o555)
  code, _, err = _call(P, ["--out", str(ro / "p.json")], tmp_path, monkeypatch, capsys)
  assert code == 2 and "is not writable" in err and "Traceback" not in err


def test_unwritable_folder_is_named(monkeypatch, tmp_path):
  from search._src import cli  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(os, "access", lambda path, mode: False)
  with pytest.raises(ValueError, match=r"--out: the folder of '.*p\.json' is not writable"):
    cli.check_out_path("out", str(tmp_path / "p.json"))


def test_at_least_thirty_cases():
  assert len(API_CASES) >= 30 and len(CLI_CASES) >= 25
