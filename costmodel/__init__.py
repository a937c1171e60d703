"""rlcost's cost model: a differentiable roofline model of RL post-training.

Specs (model, hardware, cluster, job) -> operation costs (roofline,
collectives) -> stage costs (generate, infer, train, weight sync, memory) ->
the step model (placement, schedule, work and depth) -> an :class:`Estimate`.

What a user calls is exported here: the specs, :func:`estimate`,
:func:`validate_plan`, :func:`build_plan`, :func:`calibrate`, the log readers
and the modules :mod:`~costmodel.models`, :mod:`~costmodel.hardware`,
:mod:`~costmodel.examples`, :mod:`~costmodel.plot` and
:mod:`~costmodel.validation` (published measurements as prediction cases).
The layout search's plumbing lives in :mod:`costmodel.internal`, with no
promise of stability.
"""

from costmodel import examples
from costmodel import hardware
from costmodel import models
from costmodel import plot
from costmodel import validation
from costmodel._src.fit.calibrate import CalibrationResult
from costmodel._src.fit.calibrate import calibrate
from costmodel._src.fit.measurements import StageTimes
from costmodel._src.fit.measurements import read_verl_log
from costmodel._src.fit.measurements import steady_state
from costmodel._src.fit.microbench import MicrobenchFit
from costmodel._src.fit.microbench import fit_microbenchmarks
from costmodel._src.fit.nemo_rl_log import read_nemo_rl_log
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.ops.lora import LoRA
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.hardware import Hardware
from costmodel._src.specs.job import ALGORITHMS
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.specs.multiturn import MultiTurn
from costmodel._src.specs.placement import Placement
from costmodel._src.specs.placement import build_plan
from costmodel._src.specs.placement import placement
from costmodel._src.specs.placement import placements
from costmodel._src.specs.plan import Mode
from costmodel._src.specs.plan import Plan
from costmodel._src.specs.plan import Pool
from costmodel._src.specs.plan import RolePlan
from costmodel._src.specs.plan import validate as validate_plan
from costmodel._src.specs.precision import Precision
from costmodel._src.specs.speculative import Speculative
from costmodel._src.step.buckets import step_buckets
from costmodel._src.step.estimate import estimate
from costmodel._src.step.result import Estimate

__all__ = (
    "ALGORITHMS",
    "CalibrationResult",
    "Cluster",
    "Efficiency",
    "Engine",
    "Estimate",
    "Hardware",
    "LoRA",
    "MicrobenchFit",
    "Mode",
    "ModelSpec",
    "MultiTurn",
    "Parallel",
    "Placement",
    "Plan",
    "Pool",
    "Precision",
    "RLJob",
    "ResponseLength",
    "RolePlan",
    "Speculative",
    "StageTimes",
    "build_plan",
    "calibrate",
    "estimate",
    "examples",
    "fit_microbenchmarks",
    "hardware",
    "models",
    "placement",
    "placements",
    "plot",
    "read_nemo_rl_log",
    "read_verl_log",
    "steady_state",
    "step_buckets",
    "validate_plan",
    "validation",
)
