"""The search's progress bar: shown on a terminal only, counts every phase."""

from __future__ import annotations

import io
import threading

import pytest

from search._src import progress


class _Terminal(io.StringIO):

  def isatty(self) -> bool:
    return True


def test_bar_counts_phases_and_draws_on_a_terminal():
  out = _Terminal()
  with progress.Bar(2, stream=out) as bar:
    assert bar.enabled and bar.total == 2 * len(progress.PHASES)
    for fam in ("colocated", "split"):
      for name in progress.PHASES:
        bar.phase(fam, name)
    assert bar.done == bar.total
  text = out.getvalue()
  assert "search" in text and "6/6" in text


@pytest.mark.parametrize("stream,enabled", [(io.StringIO(), True), (_Terminal(), False)])
def test_bar_is_silent_off_a_terminal_or_when_disabled(stream, enabled):
  with progress.Bar(1, enabled=enabled, stream=stream) as bar:
    assert not bar.enabled
    for name in progress.PHASES:
      bar.phase("colocated", name)
    assert bar.done == 3
  assert stream.getvalue() == ""


def test_bar_counts_from_threads():
  with progress.Bar(8, stream=io.StringIO()) as bar:
    threads = [threading.Thread(target=lambda: [bar.phase("split", p) for p in progress.PHASES])
               for _ in range(8)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  assert bar.done == 24


def test_unknown_phase_is_refused():
  with progress.Bar(1, stream=io.StringIO()) as bar:
    with pytest.raises(ValueError, match="phase='compiled'"):
      bar.phase("split", "compiled")
