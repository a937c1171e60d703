"""The HTML report: one self-contained page whose figures decode, in Python and in
headless Chromium."""

from __future__ import annotations

import base64
import functools
import html as html_lib
import html.parser
import io
import json
import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest

import costmodel as cm
import export
import search
from search._src import framework_settings
from search._src import html_report

CHROMIUM = next((b for b in ("chromium", "chromium-browser", "google-chrome",
                              "chromium-headless-shell") if shutil.which(b)),
                None)


def _inputs():
  # The search tests' problem (conftest's ``search_job`` on ``cluster_2x8``): its
  # rules of thumb are programs other modules build too.
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=128.0,
                 samples_per_prompt=8.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
  cluster = cm.Cluster("H100", 8, 2)
  plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(micro_batch=2),
                           engine=cm.Engine(tp=2, memory_fraction=0.6, max_seqs=256))
  return job, cluster, plan


@functools.cache
def _page() -> str:
  job, cluster, plan = _inputs()
  est = cm.estimate(job, plan, cluster)
  return html_report.render(job, cluster, plan, est, search.rules_of_thumb(job, cluster),
                            title="test report")


class _Parser(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.images, self.links, self.scripts, self.text = [], [], 0, []

  def handle_starttag(self, tag, attrs):
    a = dict(attrs)
    if tag == "img":
      self.images.append((a.get("alt"), a.get("src", "")))
    if tag in ("link", "script") or (tag == "a" and "href" in a):
      self.links.append((tag, a))

  def handle_data(self, data):
    self.text.append(data)


def test_page_is_self_contained_and_every_image_is_a_png():
  p = _Parser()
  p.feed(_page())
  assert not p.links  # no stylesheet, script or link to fetch
  alts = [alt for alt, _ in p.images]
  assert alts == ["timeline", "memory per GPU", "stage breakdown", "rules of thumb"]
  for alt, src in p.images:
    head, data = src.split(",", 1)
    assert head == "data:image/png;base64", alt
    raw = base64.b64decode(data, validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", alt
    pixels = matplotlib.image.imread(io.BytesIO(raw), format="png")
    assert pixels.shape[0] > 50 and pixels.shape[1] > 100, alt
    assert float(np.std(pixels[..., :3])) > 0.01, f"{alt} is blank"


def test_page_holds_the_plan_settings_per_framework_and_rules():
  page = _page()
  for name in ("veRL", "OpenRLHF", "NeMo-RL", "slime", "AReaL"):
    assert f"<h3>{name} <small>" in page
  assert "python3 -m verl.trainer.main_ppo" in page  # veRL runs this plan
  for e in export.FRAMEWORKS:
    assert export.get(e).version in page
  assert "rules of thumb" in page and "this plan is faster by" in page
  # On-policy by default: AReaL's asynchronous rule is not compared.
  for rule in ("verl", "openrlhf", "kv_fit"):
    assert f"<td>{rule}</td>" in page
  assert "actor_update" in page and "lower bound" in page  # the estimate's table


def test_page_lists_the_settings_each_framework_adapts():
  job, cluster, plan = _inputs()
  page = _page()
  listed = 0
  for fw in export.FRAMEWORKS:
    opts = framework_settings.export_options(fw, plan)
    try:
      adapted, changes = export.adapt(fw, job, plan, cluster, **opts)
      export.get(fw).export(adapted, job, cluster, **opts)
    except ValueError:  # refused: the page gives the reason instead
      continue
    for c in changes:
      assert f"<li>{html_lib.escape(c)}</li>" in page
    listed += len(changes)
  # NeMo-RL keeps a colocated policy's state on the host while vLLM generates (swap) and
  # syncs it by CUDA IPC: the plan's per-tensor sync and resident state change
  assert listed >= 2


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium-headless-shell)")
def test_page_loads_in_headless_chromium(tmp_path):
  probe = ("<script>addEventListener('load', () => document.body.setAttribute('data-images', "
           "JSON.stringify([...document.images].map(i => [i.alt, i.complete, i.naturalWidth, "
           "i.naturalHeight]))));</script></body>")
  path = tmp_path / "report.html"
  path.write_text(_page().replace("</body>", probe))
  r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                      "--virtual-time-budget=10000", "--dump-dom", path.as_uri()],
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  p = _Parser()
  attrs = {}

  class _Body(html.parser.HTMLParser):
    def handle_starttag(self, tag, a):
      if tag == "body":
        attrs.update(dict(a))

  _Body().feed(r.stdout)
  images = json.loads(attrs["data-images"])
  assert [i[0] for i in images] == ["timeline", "memory per GPU", "stage breakdown",
                                    "rules of thumb"]
  for alt, complete, width, height in images:
    assert complete and width > 100 and height > 50, alt
  p.feed(r.stdout)
  assert "test report" in "".join(p.text)
