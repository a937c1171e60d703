"""Built-in example jobs from published reference configurations.

>>> from costmodel import examples
>>> examples.names()
('mlperf-rl-gbs256', 'mlperf-rl-gbs512', 'mlperf-rl-gbs1024')
>>> examples.job("mlperf-rl-gbs512").actor.name
'Qwen/Qwen3.5-397B-A17B'
"""

from costmodel._src.specs.examples import MLPERF_ASSUMED
from costmodel._src.specs.examples import MLPERF_FACTS
from costmodel._src.specs.examples import MLPERF_SOURCE
from costmodel._src.specs.examples import cluster
from costmodel._src.specs.examples import job
from costmodel._src.specs.examples import names
from costmodel._src.specs.examples import staleness

__all__ = ("MLPERF_ASSUMED", "MLPERF_FACTS", "MLPERF_SOURCE", "cluster", "job", "names",
           "staleness")
