"""Imports of framework configs, keyed by framework name: :func:`read_config`."""

from __future__ import annotations

from typing import Any

from export._src.importing import Imported
from export._src.registry import RECORDS

IMPORT_FRAMEWORKS = tuple(RECORDS)


def _module(framework: str):
  try:
    return RECORDS[framework].importer
  except (KeyError, TypeError):
    raise ValueError(f"export.read_config: framework={framework!r} is not one of "
                     f"{IMPORT_FRAMEWORKS}") from None


def read_config(framework: str, source: Any, **missing: Any) -> Imported:
  """The job, plan and cluster of a run the user already has.

  Args:
    framework: ``verl`` (Hydra overrides as a list of ``key=value`` words, a
      text file of them, a launch script or a YAML config), ``openrlhf`` (the
      argv of ``train_ppo_ray``, or a file holding the command), ``nemo_rl``
      (a YAML config), ``slime`` (the argv of ``train.py`` / ``train_async.py``,
      :func:`export.to_slime`'s settings, or a launch script) or ``areal`` (a
      YAML experiment config).
    source: A path, a list of words, or a dict of settings.
    **missing: The facts a config does not hold (:class:`export.Given`):
      ``response_mean`` (always), ``model`` (when the model path names no
      preset), ``reward_model``, ``critic``, ``gpu``, ``gpus_per_node``,
      ``oversample``, ``engine_max_seqs``.

  Returns:
    ``Imported(job, plan, cluster)``; ``export.to_<framework>`` of it writes
    the same settings back.

  Raises:
    ValueError: naming the key and its value, or the keyword of a missing fact.

  Example:
    >>> job, plan, cluster = read_config(  # doctest: +SKIP
    ...     "verl", "run_qwen3_8b.sh", response_mean=900, model="qwen3-8b")
  """
  return _module(framework).read(source, **missing)


def unexpressed(framework: str) -> dict[str, tuple[str, ...]]:
  """The plan's fields ``framework``'s config cannot state (``{"reward.infer": (...)}``); an
  import fills them as its module documents, so a round trip compares the rest."""
  return dict(_module(framework).UNEXPRESSED)
