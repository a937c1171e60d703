"""rlcost's cost model: a differentiable roofline model of RL post-training.

Specs (model, hardware, cluster, job) -> operation costs (roofline,
collectives) -> stage costs (generate, infer, train, weight sync, memory) ->
the step model (placement, schedule, work and depth) -> an :class:`Estimate`.
"""

from costmodel import examples
from costmodel import hardware
from costmodel import models
from costmodel import plot
from costmodel import validation
from costmodel._src import xla_options
from costmodel._src.fit.calibrate import CalibrationResult
from costmodel._src.fit.calibrate import calibrate
from costmodel._src.fit.calibrate import SourceRow
from costmodel._src.fit.calibrate import SourceValidation
from costmodel._src.fit.calibrate import split_cases
from costmodel._src.fit.calibrate import validate_by_source
from costmodel._src.fit.measurements import StageTimes
from costmodel._src.fit.measurements import published_table
from costmodel._src.fit.measurements import read_verl_log
from costmodel._src.fit.measurements import steady_state
from costmodel._src.fit.microbench import MicrobenchFit
from costmodel._src.fit.microbench import fit_microbenchmarks
from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.nemo_rl_log import nemo_rl_log_cases
from costmodel._src.fit.nemo_rl_log import read_nemo_rl_log
from costmodel._src.fit.validation.log_cases import verl_log_cases
from costmodel._src.ops.collectives import collective_time
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.ops.lora import LoRA
from costmodel._src.ops.roofline import roofline
from costmodel._src.ops.smooth import positive_tau
from costmodel._src.ops.smooth import relu as smooth_relu
from costmodel._src.pytree import check_one_of
from costmodel._src.pytree import pytree_dataclass
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.constraints import check_rules
from costmodel._src.specs.constraints import engine_fields
from costmodel._src.specs.constraints import layout_fields
from costmodel._src.specs.constraints import model_fields
from costmodel._src.specs.constraints import rule_mask
from costmodel._src.specs.constraints import rule_penalty
from costmodel._src.specs.constraints import rule_violations
from costmodel._src.specs.hardware import Hardware
from costmodel._src.specs.job import ALGORITHMS
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.speculative import Speculative
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
from costmodel._src.specs.plan import required_roles
from costmodel._src.specs.plan import validate as validate_plan
from costmodel._src.specs.precision import Precision
from costmodel._src.specs.rule_table import RULE_SETS
from costmodel._src.specs.rule_table import RULES
from costmodel._src.specs.rule_table import Rule
from costmodel._src.step.estimate import estimate
from costmodel._src.step.estimate import estimate_shared
from costmodel._src.step.factored import estimate_rows
from costmodel._src.step.factored import stage_cost_rows
from costmodel._src.step.factored import stage_reads
from costmodel._src.step.buckets import step_buckets
from costmodel._src.step.estimate import stage_names
from costmodel._src.step.result import Estimate

__all__ = (
    "ALGORITHMS",
    "CalibrationResult",
    "Case",
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
    "RULES",
    "RULE_SETS",
    "ResponseLength",
    "RolePlan",
    "Rule",
    "SourceRow",
    "SourceValidation",
    "Speculative",
    "StageTimes",
    "build_plan",
    "calibrate",
    "check_one_of",
    "check_rules",
    "collective_time",
    "engine_fields",
    "estimate",
    "estimate_rows",
    "estimate_shared",
    "examples",
    "fit_microbenchmarks",
    "hardware",
    "layout_fields",
    "model_fields",
    "models",
    "nemo_rl_log_cases",
    "placement",
    "placements",
    "plot",
    "positive_tau",
    "published_table",
    "pytree_dataclass",
    "read_nemo_rl_log",
    "read_verl_log",
    "required_roles",
    "roofline",
    "rule_mask",
    "rule_penalty",
    "rule_violations",
    "smooth_relu",
    "split_cases",
    "stage_cost_rows",
    "stage_names",
    "stage_reads",
    "steady_state",
    "validate_by_source",
    "step_buckets",
    "validate_plan",
    "validation",
    "verl_log_cases",
    "xla_options",
)
