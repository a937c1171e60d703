"""Refusals that more than one framework makes: FP8 training, the weight-sync
backend, inference degrees that must match training, ReMax, a reward model on
GPUs, epochs, selective recompute, degrees a framework lacks.

Each raises a ``ValueError`` that starts with the framework's name and names
the setting, its value and why the framework cannot run it.
"""

from __future__ import annotations

from typing import Any

from export._src.common import BF16
from export._src.common import FP8_TRAINING
from export._src.common import Concrete
from export._src.common import Layout
from export._src.common import refuse


def training_fp8(framework: str, c: Concrete, key: str,
                 roles: tuple[str, ...] = ("actor", "reference", "critic")) -> bool:
  """Whether the plan trains with FP8 GEMMs (Transformer-Engine style, BF16 weights), which
  the framework's Megatron setting ``key`` gives every phase of ``roles``; refuses any other
  format, a mix, or FP8 on another role."""
  formats = {lay.precision for d in (c.train, c.infer) for r, lay in d.items() if r in roles}
  others = {lay.precision for d in (c.train, c.infer) for r, lay in d.items()
            if r not in roles} - {BF16}
  if others or len(formats) > 1 or not formats <= {BF16, FP8_TRAINING}:
    bad = next(f for f in sorted(formats | others, key=repr) if f != BF16)
    refuse(framework, "layout precision", bad, f"{key} gives every model FP8 GEMMs with BF16 "
            "weights (Precision(compute='fp8')) or none")
  return formats == {FP8_TRAINING}


def check_sync(framework: str, c: Concrete, backend: str, how: str) -> None:
  """Refuses an engine whose ``sync_backend`` is not the one the framework's placement uses."""
  if c.engine.sync_backend != backend:
    where = "colocated" if c.colocated else "on its own pool"
    raise ValueError(f"{framework}: engine.sync_backend={c.engine.sync_backend!r}: with the "
                     f"rollout {where} {framework} syncs weights by {how} ({backend!r})")


def same_degrees(framework: str, role: str, train: Layout, infer: Layout, why: str,
                 train_role: str | None = None, state: bool = False) -> None:
  """Refuses an inference layout whose degrees (and with ``state`` its offload and swap)
  differ from the training one."""
  names = ("tp", "pp", "cp", "ep", "vpp", "etp") + (("offload", "swap") if state else ())
  for name in names:
    a, b = getattr(train, name), getattr(infer, name)
    if a != b:
      raise ValueError(f"{framework}: {role}.infer.{name}={int(b)} differs from "
                       f"{train_role or role}.train.{name}={int(a)}; {why}")


def refuse_remax(framework: str, c: Concrete, why: str) -> None:
  """Refuses ReMax (its greedy-rollout baseline), saying what the framework has instead."""
  if c.algorithm == "remax":
    raise ValueError(f"{framework}: algorithm='remax': the greedy-rollout baseline has no "
                     f"setting ({why})")


def refuse_reward_model_and_epochs(framework: str, c: Concrete, scores: str,
                                   passes: str) -> None:
  """Refuses a reward model on GPUs (the framework scores rollouts with ``scores``) and more
  than one epoch (its trainer ``passes``)."""
  if c.has("reward"):
    raise ValueError(f"{framework}: role='reward' on pool {c.role_pool['reward']!r}: a reward "
                     f"model on GPUs has no placement; {framework} scores rollouts with {scores}")
  if c.ppo_epochs != 1:
    raise ValueError(f"{framework}: ppo_epochs={c.ppo_epochs}: {framework} {passes}")


def check_recompute(framework: str, where: str, lay: Layout, what: str) -> None:
  if lay.recompute == 1:
    raise ValueError(f"{framework}: {where}.recompute=selective has no setting: {what} "
                     "switches full activation checkpointing on or off; use recompute 'full' or "
                     "'none'")


def refuse_degrees(framework: str, where: str, layout: Any, names: tuple[str, ...],
                   why: str) -> None:
  """Refuses the first degree in ``names`` above 1 (one the framework lacks).

  Raises:
    ValueError: ``"{framework}: {where}.{name}={value}: {why}"``.
  """
  for name in names:
    v = getattr(layout, name)
    if v > 1:
      raise ValueError(f"{framework}: {where}.{name}={v}: {why}")
