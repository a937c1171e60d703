"""Exports of a plan to the frameworks that run it: veRL, OpenRLHF, NeMo-RL.

>>> from search import export
>>> overrides = export.to_verl(plan, job, cluster, strategy="megatron")  # doctest: +SKIP
>>> print(export.verl_command(overrides))  # doctest: +SKIP
"""

from search._src.export import openrlhf_command
from search._src.export import require_int
from search._src.export import to_nemo_rl
from search._src.export import to_openrlhf
from search._src.export import to_verl
from search._src.export import to_yaml
from search._src.export import verl_command

__all__ = (
    "openrlhf_command",
    "require_int",
    "to_nemo_rl",
    "to_openrlhf",
    "to_verl",
    "to_yaml",
    "verl_command",
)
