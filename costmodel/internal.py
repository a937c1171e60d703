"""Plumbing of the cost model for the layout search (``search``) and for tests.

Nothing here is part of the user-facing API: names may change or go without
notice. A user calls what :mod:`costmodel` exports; the search reads the
pieces below to vectorise, relax and compile the same model.

* the rule table and its vectorised forms (:data:`RULES`, :func:`rule_mask`,
  :func:`rule_penalty`, :func:`rule_violations`, the fields a rule reads);
* the smooth operators the relaxation uses (:func:`positive_tau`,
  :func:`smooth_relu`);
* pytree helpers (:func:`pytree_dataclass`, :func:`check_one_of`);
* the step model by rows and by stage (:func:`estimate_rows`,
  :func:`estimate_shared`, :func:`stage_cost_rows`, :func:`stage_reads`,
  :func:`stage_names`, :func:`stage_owners`, :func:`required_roles`, :data:`ROLES`,
  :data:`TRAINED_ROLES`);
* which GEMM formats an accelerator has (:func:`precision_available`);
* the operation costs (:func:`roofline`, :func:`collective_time`) and XLA's
  compile options (:mod:`xla_options`).
"""

from costmodel._src import xla_options
from costmodel._src.ops.collectives import collective_time
from costmodel._src.ops.roofline import roofline
from costmodel._src.ops.smooth import positive_tau
from costmodel._src.ops.smooth import relu as smooth_relu
from costmodel._src.pytree import check_one_of
from costmodel._src.pytree import pytree_dataclass
from costmodel._src.rows.estimate import estimate_rows
from costmodel._src.rows.estimate import stage_cost_rows
from costmodel._src.rows.estimate import stage_reads
from costmodel._src.specs.constraints import check_rules
from costmodel._src.specs.constraints import engine_fields
from costmodel._src.specs.constraints import layout_fields
from costmodel._src.specs.constraints import model_fields
from costmodel._src.specs.constraints import rule_mask
from costmodel._src.specs.constraints import rule_penalty
from costmodel._src.specs.constraints import rule_violations
from costmodel._src.specs.plan import ROLES
from costmodel._src.specs.precision import precision_available
from costmodel._src.specs.plan import TRAINED_ROLES
from costmodel._src.specs.plan import required_roles
from costmodel._src.specs.rule_table import RULE_SETS
from costmodel._src.specs.rule_table import RULES
from costmodel._src.specs.rule_table import Rule
from costmodel._src.step.estimate import estimate_shared
from costmodel._src.step.estimate import stage_names
from costmodel._src.step.estimate import stage_owners

__all__ = (
    "ROLES",
    "RULES",
    "RULE_SETS",
    "Rule",
    "TRAINED_ROLES",
    "check_one_of",
    "check_rules",
    "collective_time",
    "engine_fields",
    "estimate_rows",
    "estimate_shared",
    "layout_fields",
    "model_fields",
    "positive_tau",
    "precision_available",
    "pytree_dataclass",
    "required_roles",
    "roofline",
    "rule_mask",
    "rule_penalty",
    "rule_violations",
    "smooth_relu",
    "stage_cost_rows",
    "stage_names",
    "stage_owners",
    "stage_reads",
    "xla_options",
)
