"""One interface for every framework: :class:`Exporter`, and YAML text.

An exporter turns a concrete plan into the framework's own settings
(``to_config``: Hydra overrides, an argv, a nested config) and renders them
as the text a user runs (``render``: a shell command or a YAML file), headed
by a comment naming the framework version the keys were checked against.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
from typing import Any

import yaml

import costmodel as cm


def to_yaml(settings: dict[str, Any]) -> str:
  """Block-style YAML of nested dicts of scalars and lists (PyYAML, key order kept).

  Example:
    >>> print(to_yaml({"cluster": {"num_nodes": 2, "gpus_per_node": 8}}), end="")
    cluster:
      num_nodes: 2
      gpus_per_node: 8
  """
  return yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)


@dataclasses.dataclass(frozen=True)
class Exporter:
  """A framework's export: its settings for a plan and the text that runs them.

  Attributes:
    name: Registry key (``export.get(name)``).
    framework: The framework's name as its users write it.
    version: The release or commit whose keys and flags the export follows
      (``repository@commit``, or a tag with its commit).
    to_config: ``(plan, job, cluster, **options) -> settings``; raises
      ValueError naming the setting the framework cannot express.
    render_settings: ``settings -> text`` (command line or YAML).
    kind: ``"command"`` or ``"yaml"``: what :meth:`render` writes.
    adapt: ``(plan, **options) -> plan``: the plan with the settings the
      framework fixes for its placement and has no key for (its weight sync,
      where it keeps a role's state between stages), so that a plan searched
      without them exports; the estimate of the adapted plan is the run's.
    forces: ``{setting: source}`` for each setting ``adapt`` may change
      (``"engine.sync_backend"``, ``"<role>.<field>"``): the framework code that
      forces it, which :func:`export.adapt` names on each change line.
  """

  name: str
  framework: str
  version: str
  to_config: Callable[..., Any]
  render_settings: Callable[[Any], str]
  kind: str
  adapt: Callable[..., cm.Plan] = lambda plan, **options: plan
  forces: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def header(self) -> str:
    """The comment line that states the framework version an export targets."""
    return f"# {self.framework} export (keys checked against {self.version})"

  def render(self, settings: Any) -> str:
    """The settings as runnable text, its first line :meth:`header`."""
    return f"{self.header()}\n{self.render_settings(settings).rstrip()}\n"

  def export(self, plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, **options: Any) -> str:
    """``render(to_config(adapt(plan, **options), job, cluster, **options))``: the plan as the
    framework runs it (:func:`export.adapt` also says what that changed)."""
    return self.render(self.to_config(self.adapt(plan, **options), job, cluster, **options))
