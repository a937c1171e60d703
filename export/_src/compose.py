"""YAML configs composed as their framework composes them, with OmegaConf.

NeMo-RL (``nemo_rl/utils/config.py`` @7ea279a, ``load_config_with_inheritance``)
merges the files a config's ``defaults:`` names (one path or a list, relative
to the config's folder, each resolved against its own folder), parents first,
a section marked ``_override_: true`` replacing its parent's instead of
merging; it registers the resolvers ``add``, ``mul``, ``div`` and ``max``.
AReaL's experiment configs interpolate their own keys (``${actor.backend}``).
Both resolve ``${...}`` with OmegaConf, as done here.

A ``defaults:`` file that is not there (a config copied out of the
framework's tree) is skipped and listed under :data:`UNFOUND`; the keys the
config itself holds are read, and a key it lacks is refused naming it.

An interpolation that cannot resolve (``${oc.env:WANDB_DIR}`` unset, a key
left ``???``) keeps its text: such keys name paths and loggers, and a cost
setting that reads one is refused naming the key and its text.
"""

from __future__ import annotations

import os
from typing import Any
import warnings

from omegaconf import DictConfig
from omegaconf import ListConfig
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
import yaml

# NeMo-RL's resolvers (nemo_rl/utils/config.py @7ea279a, register_omegaconf_resolvers).
_RESOLVERS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
              "max": lambda a, b: max(a, b)}


def _register():
  for name, f in _RESOLVERS.items():
    if not OmegaConf.has_resolver(name):
      with warnings.catch_warnings():  # omegaconf 2.4 renames it register_resolver
        warnings.simplefilter("ignore")
        OmegaConf.register_new_resolver(name, f)


# The key under which a composed config lists the defaults: files it could not find.
UNFOUND = "defaults:unfound"


def _load(path: str, framework: str) -> DictConfig:
  if not os.path.isfile(path):
    raise ValueError(f"{framework}: {path!r} (a config or a defaults: entry) is not a file")
  try:
    cfg = OmegaConf.load(path)
  except (yaml.YAMLError, OmegaConfBaseException) as e:
    raise ValueError(f"{framework}: {path!r} is not a YAML config: "
                     f"{str(e).splitlines()[0]}") from None
  if not isinstance(cfg, DictConfig):
    raise ValueError(f"{framework}: {path!r} is not a YAML mapping")
  return cfg


def _merge(base: DictConfig, child: DictConfig) -> DictConfig:
  for key in list(child.keys()):
    if OmegaConf.is_missing(child, key):
      continue
    node = child[key]
    if isinstance(node, DictConfig) and node.get("_override_", False):
      node.pop("_override_")
      if key in base:
        base.pop(key)
  return OmegaConf.merge(base, child)


def with_inheritance(path: str, framework: str, depth: int = 0) -> DictConfig:
  """The config at ``path`` merged over the files its ``defaults:`` names (NeMo-RL)."""
  if depth > 16:
    raise ValueError(f"{framework}: defaults: chains deeper than 16 files at {path!r} (a cycle?)")
  cfg = _load(path, framework)
  if "defaults" not in cfg:
    return cfg
  parents = cfg.pop("defaults")
  parents = [parents] if isinstance(parents, str) else (
      [str(p) for p in parents] if isinstance(parents, ListConfig) else None)
  if parents is None:
    raise ValueError(f"{framework}: {path!r} defaults: must be a path or a list of paths")
  base = OmegaConf.create({})
  here = os.path.dirname(os.path.abspath(path))
  unfound = []
  for p in parents:
    parent = p if os.path.isabs(p) else os.path.join(here, p)
    if not os.path.isfile(parent):  # a config copied out of the framework's tree
      unfound.append(p)
      continue
    base = _merge(base, with_inheritance(parent, framework, depth + 1))
  out = _merge(base, cfg)
  if unfound:
    out[UNFOUND] = unfound
  return out


def flat(cfg: DictConfig) -> dict[str, Any]:
  """``{dotted key: value}`` with ``${...}`` resolved where it can be (else kept as text)."""
  _register()
  out: dict[str, Any] = {}

  def walk(node, prefix):
    for key in node.keys():
      dotted = f"{prefix}{key}"
      try:
        child = node[key]
        if isinstance(child, DictConfig):
          walk(child, dotted + ".")
          continue
        if isinstance(child, ListConfig):
          child = OmegaConf.to_container(child, resolve=True)
        out[dotted] = child
      except OmegaConfBaseException:
        out[dotted] = node._get_node(key)._value()  # the interpolation as written

  walk(cfg, "")
  return out


def read(source: Any, framework: str, inherit: bool) -> dict[str, Any]:
  """A YAML file, composed (``inherit``: NeMo-RL's ``defaults:``) and
  interpolated, as flat dotted keys."""
  path = os.fspath(source)
  return flat(with_inheritance(path, framework) if inherit else _load(path, framework))
