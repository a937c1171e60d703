"""rlcost's cost model: a differentiable roofline model of RL post-training.

Specs (model, hardware, cluster, job) -> operation costs (roofline,
collectives) -> stage costs (generate, infer, train, weight sync, memory) ->
the step model (placement, schedule, work and depth) -> an :class:`Estimate`.
"""

from costmodel import hardware
from costmodel import models
from costmodel import plot
from costmodel import validation
from costmodel._src.calibrate import CalibrationResult
from costmodel._src.calibrate import calibrate
from costmodel._src.calibrate import split_cases
from costmodel._src.cluster import Cluster
from costmodel._src.collectives import collective_time
from costmodel._src.efficiency import Efficiency
from costmodel._src.estimate import Estimate
from costmodel._src.hardware import Hardware
from costmodel._src.job import ResponseLength
from costmodel._src.job import RLJob
from costmodel._src.layout import Engine
from costmodel._src.layout import Parallel
from costmodel._src.measurements import StageTimes
from costmodel._src.measurements import published_table
from costmodel._src.measurements import read_verl_log
from costmodel._src.measurements import steady_state
from costmodel._src.microbench import MicrobenchFit
from costmodel._src.microbench import fit_microbenchmarks
from costmodel._src.model import ModelSpec
from costmodel._src.plan import Mode
from costmodel._src.plan import Plan
from costmodel._src.plan import Pool
from costmodel._src.plan import RolePlan
from costmodel._src.plan import validate as validate_plan
from costmodel._src.precision import Precision
from costmodel._src.roofline import roofline
from costmodel._src.step import estimate
from costmodel._src.validation.cases import Case
from costmodel._src.validation.log_cases import verl_log_cases

__all__ = (
    "CalibrationResult",
    "Case",
    "Cluster",
    "Efficiency",
    "Engine",
    "Estimate",
    "Hardware",
    "MicrobenchFit",
    "Mode",
    "ModelSpec",
    "Parallel",
    "Plan",
    "Pool",
    "Precision",
    "RLJob",
    "ResponseLength",
    "RolePlan",
    "StageTimes",
    "calibrate",
    "collective_time",
    "estimate",
    "fit_microbenchmarks",
    "hardware",
    "models",
    "plot",
    "published_table",
    "read_verl_log",
    "roofline",
    "split_cases",
    "steady_state",
    "validate_plan",
    "validation",
    "verl_log_cases",
)
