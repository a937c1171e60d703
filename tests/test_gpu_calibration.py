"""Tests for the GPU calibration script, run in quick mode on the CPU."""

import datetime
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import gpu_calibration as gc

# Schema 2 added the shrinking-batch decode loop and its overhead fit.
_TOP_KEYS = {"schema_version", "date", "jax_version", "device", "config",
             "matmul", "hbm", "decode_model", "decode", "decode_loop",
             "step_overhead_fit", "elapsed_s"}
_MATMUL_KEYS = {"m", "n", "k", "dtype", "out_dtype", "flops", "seconds",
                "flops_per_s", "fraction_of_peak"}
_HBM_KEYS = {"kernel", "n_elements", "dtype", "bytes_read", "bytes_written",
             "bytes_moved", "seconds", "bytes_per_s"}
_DECODE_KEYS = {"batch", "context_len", "seconds", "tokens_per_s", "flops",
                "weight_bytes_read", "kv_bytes_read", "kv_bytes_written",
                "bytes_min", "flops_per_s", "bytes_per_s"}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  path = tmp_path_factory.mktemp("calibration") / "cpu.json"
  gc.main(["gpu_calibration", "--quick", f"--out={path}"])
  with open(path) as f:
    return json.load(f)


def test_report_header(report):
  assert set(report) == _TOP_KEYS
  assert report["schema_version"] == 2
  assert report["jax_version"] == jax.__version__
  assert set(report["device"]) == {"platform", "device_kind", "device_count"}
  assert report["device"]["platform"] == jax.devices()[0].platform
  date = datetime.datetime.fromisoformat(report["date"])
  assert date.utcoffset() == datetime.timedelta(0)
  assert report["config"]["quick"] is True
  assert report["config"]["repeats"] == 3
  assert report["elapsed_s"] > 0


def test_matmul_records(report):
  records = report["matmul"]
  shapes = {(r["m"], r["n"], r["k"]) for r in records}
  assert shapes == {(m, n, k) for k, n in gc._QUICK_MATMUL_KN
                    for m in gc._QUICK_MATMUL_M}
  for r in records:
    assert set(r) == _MATMUL_KEYS
    assert isinstance(r["flops"], int)
    assert r["flops"] == 2 * r["m"] * r["n"] * r["k"]
    assert r["dtype"] == "bfloat16"
    assert r["seconds"] > 0
    assert r["flops_per_s"] == pytest.approx(r["flops"] / r["seconds"])
    assert r["fraction_of_peak"] is None


def test_matmul_fraction_of_peak():
  (r,) = gc.measure_matmul([(2, 4, 8)], repeats=1, min_repeat_s=0,
                           peak_flops_per_s=1e9)
  assert r["flops"] == 128
  assert r["fraction_of_peak"] == pytest.approx(r["flops_per_s"] / 1e9)


def test_hbm_records(report):
  records = report["hbm"]
  sizes = gc.hbm_sizes_bytes(gc._QUICK_HBM_MIN_BYTES, gc._QUICK_HBM_MAX_BYTES)
  assert sizes[0] == 2**16 and sizes[-1] == 2**20
  assert sorted((r["kernel"], r["bytes_read"]) for r in records) == sorted(
      (kernel, size) for kernel in ("scale", "sum") for size in sizes)
  for r in records:
    assert set(r) == _HBM_KEYS
    assert r["bytes_read"] == 2 * r["n_elements"]  # bf16 input.
    expected_written = r["bytes_read"] if r["kernel"] == "scale" else 2
    assert r["bytes_written"] == expected_written
    assert r["bytes_moved"] == r["bytes_read"] + r["bytes_written"]
    assert r["seconds"] > 0
    assert r["bytes_per_s"] == pytest.approx(r["bytes_moved"] / r["seconds"])


def test_decode_records(report):
  model = report["decode_model"]
  config = gc.QUICK_DECODER
  assert model["n_params"] == config.n_params
  assert model["kv_bytes_per_token"] == (
      2 * config.n_layers * config.n_kv_heads * config.head_dim * 2)
  records = report["decode"]
  assert [r["batch"] for r in records] == list(gc._QUICK_DECODE_BATCHES)
  for r in records:
    assert set(r) == _DECODE_KEYS
    batch = r["batch"]
    assert r["context_len"] == config.context_len
    assert r["seconds"] > 0
    assert r["tokens_per_s"] == pytest.approx(batch / r["seconds"])
    assert r["flops"] == batch * model["flops_per_token"]
    assert r["kv_bytes_read"] == (
        batch * config.context_len * model["kv_bytes_per_token"])
    assert r["kv_bytes_written"] == batch * model["kv_bytes_per_token"]
    assert r["bytes_min"] == (r["weight_bytes_read"] + r["kv_bytes_read"] +
                              r["kv_bytes_written"])


def test_param_count_matches_weights():
  config = gc.QUICK_DECODER
  params = gc.init_decoder(jax.random.key(0), config)
  assert sum(x.size for x in jax.tree.leaves(params)) == config.n_params
  full = jax.eval_shape(lambda: gc.init_decoder(jax.random.key(0),
                                                gc.FULL_DECODER))
  assert sum(x.size for x in jax.tree.leaves(full)) == gc.FULL_DECODER.n_params
  assert gc.FULL_DECODER.n_params == 1_100_048_384  # TinyLlama-1.1B.


def test_decode_step_shape_finite_and_causal():
  config = gc.QUICK_DECODER
  batch, pos = 3, 5
  params = gc.init_decoder(jax.random.key(1), config)
  key_k, key_v = jax.random.split(jax.random.key(2))
  shape = (batch, config.context_len, config.n_kv_heads, config.head_dim)
  cache = [{"k": jax.random.normal(jax.random.fold_in(key_k, i), shape,
                                   jnp.bfloat16),
            "v": jax.random.normal(jax.random.fold_in(key_v, i), shape,
                                   jnp.bfloat16)}
           for i in range(config.n_layers)]
  tokens = jnp.array([0, 7, 200], jnp.int32)
  step = jax.jit(gc.decode_step, static_argnames="config")
  logits, new_cache = step(params, cache, tokens, jnp.int32(pos),
                           config=config)
  assert logits.shape == (batch, config.vocab_size)
  assert logits.dtype == jnp.float32
  assert bool(jnp.all(jnp.isfinite(logits)))
  for old, new in zip(cache, new_cache, strict=True):
    for name in ("k", "v"):
      assert new[name].shape == shape and new[name].dtype == jnp.bfloat16
      changed = np.any(np.asarray(old[name] != new[name]), axis=(0, 2, 3))
      assert changed.tolist() == [t == pos for t in range(config.context_len)]
  # Slots after `pos` are masked: overwriting them leaves the logits alone.
  garbled = [{name: c[name].at[:, pos + 1:].set(100.0) for name in c}
             for c in cache]
  logits_garbled, _ = step(params, garbled, tokens, jnp.int32(pos),
                           config=config)
  np.testing.assert_array_equal(np.asarray(logits), np.asarray(logits_garbled))


def test_init_kv_cache_is_zero_and_sized():
  config = gc.QUICK_DECODER
  cache = gc.init_kv_cache(config, 2)
  assert len(cache) == config.n_layers
  total_bytes = sum(x.nbytes for x in jax.tree.leaves(cache))
  assert total_bytes == 2 * config.context_len * config.kv_bytes_per_token
  assert not any(bool(jnp.any(x)) for x in jax.tree.leaves(cache))


@pytest.mark.parametrize("kwargs, field", [
    ({"repeats": -1}, "repeats"),
    ({"repeats": 0}, "repeats"),
    ({"decode_batches": []}, "decode_batches"),
    ({"decode_batches": [4, 0]}, "decode_batches"),
    ({"max_hbm_bytes": 0}, "max_hbm_bytes"),
    ({"max_hbm_bytes": 1024}, "max_hbm_bytes"),
    ({"peak_flops_per_s": -1.0}, "peak_flops_per_s"),
    ({"decode_context_len": 0}, "decode_context_len"),
    ({"min_repeat_s": -1.0}, "min_repeat_s"),
])
def test_run_all_rejects_bad_values(kwargs, field):
  with pytest.raises(ValueError, match=field):
    gc.run_all(quick=True, **kwargs)


@pytest.mark.parametrize("flag, field", [
    ("--repeats=-1", "repeats"),
    ("--decode_batches=", "decode_batches"),
    ("--decode_batches=1,x", "decode_batches"),
    ("--max_hbm_bytes=-5", "max_hbm_bytes"),
    ("--peak_flops_per_s=0", "peak_flops_per_s"),
])
def test_main_rejects_bad_flags(tmp_path, flag, field):
  out = tmp_path / "never.json"
  with pytest.raises(ValueError, match=field):
    gc.main(["gpu_calibration", "--quick", f"--out={out}", flag])
  assert not out.exists()


def test_main_requires_out():
  with pytest.raises(ValueError, match="out"):
    gc.main(["gpu_calibration", "--quick"])


@pytest.mark.parametrize("call, field", [
    (lambda: gc.measure_matmul([(0, 4, 4)], repeats=1), "m"),
    (lambda: gc.measure_matmul([(4, 4)], repeats=1), "shapes_mnk"),
    (lambda: gc.measure_hbm([3], repeats=1), "sizes_bytes"),
    (lambda: gc.measure_hbm([1024], repeats=1, kernels=("copy",)), "kernels"),
    (lambda: gc.measure_decode(gc.QUICK_DECODER, [], repeats=1),
     "decode_batches"),
    (lambda: gc.DecoderConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=3,
                              n_kv_heads=2, head_dim=4, d_ff=8,
                              context_len=4), "n_kv_heads"),
    (lambda: gc.DecoderConfig(vocab_size=8, d_model=8, n_layers=0, n_heads=2,
                              n_kv_heads=2, head_dim=4, d_ff=8,
                              context_len=4), "n_layers"),
])
def test_measure_functions_reject_bad_values(call, field):
  with pytest.raises(ValueError, match=field):
    call()


def test_hbm_sizes_ladder():
  assert gc.hbm_sizes_bytes(2**20, 2**22 + 5) == [2**20, 2**21, 2**22]
  assert gc.hbm_sizes_bytes(2**20, 2**20) == [2**20]
  assert math.log2(gc.hbm_sizes_bytes(2**20, 2**32)[-1]) == 32


def test_decode_loop_records(report):
  loop = report["decode_loop"]
  assert [r["batch"] for r in loop] == sorted(gc._QUICK_DECODE_BATCHES, reverse=True)
  for r in loop:
    assert r["steps"] == 4
    assert r["kernel_seconds_per_step"] > 0 and r["loop_seconds_per_step"] > 0
    assert r["host_overhead_s"] == pytest.approx(
        r["loop_seconds_per_step"] - r["kernel_seconds_per_step"])
  fit = report["step_overhead_fit"]
  assert set(fit) == {"decode_step_overhead_s", "decode_seq_overhead_s"}
  assert all(math.isfinite(v) for v in fit.values())


def test_fit_step_overhead_recovers_a_line():
  records = [{"batch": b, "host_overhead_s": 2e-3 + 5e-5 * b} for b in (1, 4, 16, 64)]
  fit = gc.fit_step_overhead(records)
  assert fit["decode_step_overhead_s"] == pytest.approx(2e-3, rel=1e-9)
  assert fit["decode_seq_overhead_s"] == pytest.approx(5e-5, rel=1e-9)
  one = gc.fit_step_overhead([{"batch": 8, "host_overhead_s": 3e-3}])
  assert one == {"decode_step_overhead_s": 3e-3, "decode_seq_overhead_s": 0.0}
  with pytest.raises(ValueError, match="records"):
    gc.fit_step_overhead([])
  with pytest.raises(ValueError, match="steps_per_batch"):
    gc.measure_decode_loop(gc.QUICK_DECODER, [1], steps_per_batch=0)
