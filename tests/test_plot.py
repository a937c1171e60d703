"""Tests of costmodel.plot: figures built headless from real estimates."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")

from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import costmodel as cm  # noqa: E402
from costmodel import plot  # noqa: E402

GIB = 2.0**30
TERA = 1e12


@pytest.fixture(scope="module")
def setup():
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(cm.hardware.get("H100"), 8, 8)
  job = cm.RLJob("grpo", model, prompts_per_step=512, samples_per_prompt=8, prompt_len=1024,
                 response=cm.ResponseLength.from_mean_max(2000, 8192))
  train = cm.Parallel(tp=2, micro_batch=2)
  plans = {
      "colocated": cm.Plan.colocated(job, cluster, train=train, engine=cm.Engine(tp=2)),
      "split": cm.Plan.split(job, cluster, 32, train=train, engine=cm.Engine(tp=2)),
      # Unsharded Adam state of 7.6B parameters (~85 GiB) cannot fit on 80 GiB.
      "oom": cm.Plan.colocated(job, cluster, train=cm.Parallel(zero_stage=0, micro_batch=2),
                               engine=cm.Engine(tp=2)),
  }
  est = {k: cm.estimate(job, p, cluster) for k, p in plans.items()}
  return job, cluster, plans, est


def _bars(ax):
  return [c for c in ax.containers if isinstance(c, BarContainer)]


def test_public_names():
  assert set(plot.__all__) == {"timeline", "memory", "stage_breakdown", "roofline",
                               "roofline_points", "search_trajectory", "error_plot", "scaling"}
  for name in plot.__all__:
    assert callable(getattr(plot, name))


def test_import_costmodel_does_not_import_matplotlib():
  code = "import sys, costmodel; print('matplotlib' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "False"


def test_timeline_colocated(setup):
  _, _, _, est = setup
  e = est["colocated"]
  fig = plot.timeline(e)
  assert isinstance(fig, Figure)
  ax = fig.axes[0]
  assert len(ax.patches) == len(e.stage_names)  # one bar per stage, cpu included
  assert [t.get_text() for t in ax.get_yticklabels()] == ["all (64 GPUs)", "cpu"]
  start, end = np.asarray(e.start_s), np.asarray(e.end_s)
  for i, rect in enumerate(ax.patches):
    np.testing.assert_allclose(rect.get_x(), start[i], rtol=1e-6)
    np.testing.assert_allclose(rect.get_width(), end[i] - start[i], rtol=1e-6, atol=1e-9)
    row = 1 if e.stage_pools[i] == "cpu" else 0
    np.testing.assert_allclose(rect.get_y() + rect.get_height() / 2, row)
  step = float(e.step_time_s)
  (vline,) = ax.lines
  np.testing.assert_allclose(vline.get_xdata(), [step, step])
  assert ax.get_title() == f"sync: step {step:.2f} s"
  assert "s)" in ax.get_xlabel()


def test_timeline_split_draws_weight_sync_on_both_pools(setup):
  _, _, _, est = setup
  e = est["split"]
  ax = plot.timeline(e).axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == ["gen (32 GPUs)", "train (32 GPUs)",
                                                          "cpu"]
  # A synchronous weight sync holds both pools: one extra, hatched bar on gen.
  assert len(ax.patches) == len(e.stage_names) + 1
  extra = ax.patches[-1]
  assert extra.get_hatch() == "//"
  assert extra.get_y() + extra.get_height() / 2 == 0
  i = e.stage_names.index("weight_sync")
  np.testing.assert_allclose(extra.get_x(), float(e.start_s[i]), rtol=1e-6)


def test_memory_stacks_seven_parts_per_gpu_stage(setup):
  _, _, _, est = setup
  e = est["split"]
  ax = plot.memory(e).axes[0]
  gpu = [i for i, p in enumerate(e.stage_pools) if p != "cpu"]
  bars = _bars(ax)
  assert len(bars) == 7  # feasible: no outline container
  mem = np.asarray(e.memory_bytes)[gpu] / GIB
  parts = ["weights", "gradients", "optimizer", "activations", "logits", "kv_cache",
           "workspace"]
  assert [c.get_label() for c in bars] == parts
  for j, c in enumerate(bars):
    assert len(c) == len(gpu)
    np.testing.assert_allclose([r.get_height() for r in c], mem[:, j], rtol=1e-6)
    np.testing.assert_allclose([r.get_y() for r in c], mem[:, :j].sum(-1), rtol=1e-6,
                               atol=1e-9)
  legend = {t.get_text() for t in ax.get_legend().get_texts()}
  assert legend == set(parts) | {"limit per GPU"}
  (limits,) = [c for c in ax.collections if isinstance(c, LineCollection)]
  ys = [seg[0][1] for seg in limits.get_segments()]
  np.testing.assert_allclose(ys, np.asarray(e.memory_limit_bytes)[gpu] / GIB, rtol=1e-6)
  assert "GiB" in ax.get_ylabel()
  assert all(t.get_color() != "red" for t in ax.get_xticklabels())


def test_memory_highlights_stages_that_do_not_fit(setup):
  _, _, _, est = setup
  e = est["oom"]
  assert not bool(e.feasible)
  ax = plot.memory(e).axes[0]
  gpu = [e.stage_names[i] for i, p in enumerate(e.stage_pools) if p != "cpu"]
  over = {v.split("'")[1] for v in e.violations}
  assert "actor_update" in over
  red = {gpu[k] for k, t in enumerate(ax.get_xticklabels()) if t.get_color() == "red"}
  assert red == over
  bars = _bars(ax)
  assert len(bars) == 8 and bars[-1].get_label() == "does not fit"
  assert len(bars[-1]) == len(over)
  assert ax.get_title().endswith(f"{len(over)} stage(s) do not fit")


def test_stage_breakdown(setup):
  _, _, _, est = setup
  e = est["colocated"]
  ax = plot.stage_breakdown(e).axes[0]
  bars = _bars(ax)
  assert [c.get_label() for c in bars] == ["compute", "memory", "comm", "bubble", "overhead"]
  widths = np.array([[r.get_width() for r in c] for c in bars]).T
  np.testing.assert_allclose(widths, np.asarray(e.time_parts_s), rtol=1e-6, atol=1e-9)
  ends = np.array([r.get_x() + r.get_width() for r in bars[-1]])
  np.testing.assert_allclose(ends, np.asarray(e.time_parts_s).sum(-1), rtol=1e-6)
  assert [t.get_text() for t in ax.get_yticklabels()][0] == "generate (all)"


def test_roofline_points(setup):
  job, cluster, plans, est = setup
  pts = plot.roofline_points(job, plans["split"], cluster)
  assert [p[0] for p in pts] == ["generate (decode)", "reference", "old_log_prob",
                                 "actor_update"]
  hw = cluster.accelerator
  ridge = hw.peak_flops_per_s / hw.hbm_bandwidth_bytes_per_s
  for label, intensity, achieved in pts:
    roof = min(hw.peak_flops_per_s * hw.matmul_efficiency_max,
               intensity * hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency_max)
    assert 0 < achieved <= roof * (1 + 1e-6), label
  # Decode at the peak concurrency B is memory bound; the brief's formula
  # (2 * active params * B + attention) / (weights + KV read), per TP rank,
  # agrees within 10% (element-wise traffic and the embedding account for the rest).
  m = job.actor
  b = float(est["split"].gen_concurrency)
  knots = np.asarray(job.response.knots)
  ctx = 1024 + 0.5 * np.mean(knots**2) / np.mean(knots)
  flops = 2 * m.active_params * b + m.attention_flops_per_token(ctx) * b
  nbytes = 2 * m.total_params + b * ctx * m.kv_bytes_per_token(2.0)
  assert pts[0][1] < ridge
  np.testing.assert_allclose(pts[0][1], flops / nbytes, rtol=0.1)
  # A micro-batch of 2 x 3,024 tokens is compute bound, and below the
  # weights-only intensity (tokens per weight read, +10% for attention).
  for _, intensity, _ in pts[1:]:
    assert ridge < intensity < 1.1 * 2 * 3024
  # Reference and old log-probs run the same model, layout and micro-batch.
  assert pts[1][1:] == pts[2][1:]


def test_roofline_figure(setup):
  job, cluster, plans, _ = setup
  hw = cluster.accelerator
  pts = plot.roofline_points(job, plans["colocated"], cluster)
  ax = plot.roofline(hw, pts).axes[0]
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert len(ax.lines) == 2
  peak, best = ax.lines
  assert peak.get_linestyle() == "--"
  assert max(peak.get_ydata()) == pytest.approx(hw.peak_flops_per_s / TERA)
  assert max(best.get_ydata()) == pytest.approx(
      hw.peak_flops_per_s * hw.matmul_efficiency_max / TERA)
  scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
  assert len(scatters) == len(pts)
  np.testing.assert_allclose([s.get_offsets()[0][1] for s in scatters],
                             [p[2] / TERA for p in pts])
  assert len(ax.texts) == len(pts)
  assert "FLOP/byte" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
  assert len(plot.roofline(hw).axes[0].collections) == 0


@pytest.mark.parametrize("bad", [("a", 1.0), ("a", -1.0, 1e12), ("a", 10.0, float("nan"))])
def test_roofline_rejects_bad_points(bad):
  with pytest.raises(ValueError, match="points"):
    plot.roofline(cm.hardware.get("H100"), [bad])


def test_search_trajectory():
  history = {"colocated": np.array([120.0, 100.0, 95.0, 95.0]),
             "split": np.array([110.0, np.inf, 90.0, 88.0])}
  ax = plot.search_trajectory(history, {"rounded": 90.5, "exhaustive": 88.0}).axes[0]
  assert len(ax.lines) == 4
  np.testing.assert_array_equal(ax.lines[0].get_ydata(), history["colocated"])
  np.testing.assert_array_equal(ax.lines[1].get_ydata(), [110.0, np.nan, 90.0, 88.0])
  np.testing.assert_array_equal(ax.lines[3].get_ydata(), [88.0, 88.0])
  labels = [t.get_text() for t in ax.get_legend().get_texts()]
  assert labels == ["colocated (best 95.00 s)", "split (best 88.00 s)", "rounded: 90.50 s",
                    "exhaustive: 88.00 s"]
  assert ax.get_yscale() == "linear"
  wide = plot.search_trajectory({"a": [1000.0, 10.0]}).axes[0]
  assert wide.get_yscale() == "log"


@pytest.mark.parametrize("history,match", [({}, "history"), ([1.0, 2.0], "history"),
                                           ({"a": []}, r"history\['a'\]"),
                                           ({"a": [[1.0]]}, r"history\['a'\]"),
                                           ({"a": [np.nan]}, r"history\['a'\]")])
def test_search_trajectory_rejects_bad_history(history, match):
  with pytest.raises(ValueError, match=match):
    plot.search_trajectory(history)


def test_error_plot():
  published = np.array([10.0, 35.0, 120.0, 400.0, 55.0])
  predicted = published * np.array([1.05, 0.9, 1.3, 1.0, 0.95])
  ax = plot.error_plot(predicted, published, labels=list("abcde"),
                       groups=["x", "x", "y", "y", "z"]).axes[0]
  scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
  assert len(scatters) == 3  # one per group
  points = np.concatenate([s.get_offsets() for s in scatters])
  assert len(points) == 5
  np.testing.assert_allclose(sorted(points[:, 0]), sorted(published))
  np.testing.assert_allclose(sorted(points[:, 1]), sorted(predicted))
  assert sorted(t.get_text() for t in ax.texts) == list("abcde")
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  # Median |error| of (5%, 10%, 30%, 0%, 5%) is 5%; 4 of 5 within 20%.
  assert ax.get_title() == "5 points: median |error| 5.0%, 80% within 20%"
  (diag,) = ax.lines
  np.testing.assert_allclose(diag.get_xdata(), diag.get_ydata())
  no_labels = plot.error_plot(predicted, published).axes[0]
  assert len(no_labels.texts) == 0
  many = plot.error_plot(np.arange(1.0, 31.0), np.arange(1.0, 31.0), labels=range(30)).axes[0]
  assert len(many.texts) == 0  # too many points to annotate


@pytest.mark.parametrize("kwargs,match", [
    (dict(predicted=[1.0, 2.0], published=[1.0]), "published"),
    (dict(predicted=[1.0, 2.0], published=[1.0, 2.0], labels=["a"]), "labels"),
    (dict(predicted=[1.0, 2.0], published=[1.0, 2.0], groups=["a", "b", "c"]), "groups"),
    (dict(predicted=[1.0, 0.0], published=[1.0, 2.0]), "predicted"),
    (dict(predicted=[], published=[]), "predicted"),
])
def test_error_plot_rejects_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    plot.error_plot(**kwargs)


def test_scaling():
  gpus = [8, 16, 32, 64]
  series = {"colocated": [400.0, 210.0, 115.0, 70.0], "split": [380.0, 200.0, 105.0, 60.0]}
  ax = plot.scaling(gpus, series).axes[0]
  assert len(ax.lines) == 3
  np.testing.assert_allclose(ax.lines[1].get_ydata(), series["split"])
  np.testing.assert_allclose(ax.lines[2].get_ydata(), [400.0, 200.0, 100.0, 50.0])  # ideal
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["colocated", "split",
                                                                 "ideal (1/GPUs)"]
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  one = plot.scaling(gpus, np.array([4.0, 3.0, 2.0, 1.5]), ideal=False).axes[0]
  assert len(one.lines) == 1 and one.get_legend() is None
  two = plot.scaling(gpus, np.ones((2, 4)), labels=["a", "b"]).axes[0]
  assert len(two.lines) == 3


@pytest.mark.parametrize("kwargs,match", [
    (dict(gpus=[8, 16], step_times=[[1.0, 2.0], [1.0]]), r"step_times\[1\]"),
    (dict(gpus=[8, 16], step_times=[1.0, 2.0], labels=["a", "b"]), "labels"),
    (dict(gpus=[8, 0], step_times=[1.0, 2.0]), "gpus"),
    (dict(gpus=[8, 16], step_times=[]), "step_times"),
])
def test_scaling_rejects_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    plot.scaling(**kwargs)


def test_figures_save_to_png(setup, tmp_path):
  job, cluster, plans, est = setup
  figs = {
      "timeline": plot.timeline(est["split"]),
      "memory": plot.memory(est["oom"]),
      "stage_breakdown": plot.stage_breakdown(est["colocated"]),
      "roofline": plot.roofline(cluster.accelerator,
                                plot.roofline_points(job, plans["split"], cluster)),
      "search_trajectory": plot.search_trajectory({"a": [3.0, 2.0, 1.5]}, {"rounded": 1.6}),
      "error_plot": plot.error_plot([1.0, 2.2], [1.1, 2.0], labels=["p", "q"]),
      "scaling": plot.scaling([8, 16], [2.0, 1.2]),
  }
  for name, fig in figs.items():
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", name
    assert len(data) > 5_000, name


def test_draws_into_given_axes(setup):
  _, _, _, est = setup
  fig = Figure(figsize=(12, 4))
  ax1, ax2 = fig.subplots(1, 2)
  assert plot.timeline(est["colocated"], ax=ax1) is fig
  assert plot.memory(est["colocated"], ax=ax2) is fig
  assert len(fig.axes) == 2
  assert len(ax1.patches) == len(est["colocated"].stage_names)
  assert len(_bars(ax2)) == 7


def test_batched_estimate_is_rejected(setup):
  _, _, _, est = setup
  batched = jax.tree.map(lambda x: jnp.stack([x, x]), est["colocated"])
  for fn in (plot.timeline, plot.memory, plot.stage_breakdown):
    with pytest.raises(ValueError, match="estimate"):
      fn(batched)
  with pytest.raises(ValueError, match="estimate"):
    plot.timeline("not an estimate")
