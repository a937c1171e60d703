"""rlcost's layout search: search methods with one contract (``search.run``), the
gradient search (relaxation, optax optimisation, rounding), baselines."""

from search._src.bound import FamilyBound
from search._src.frameworks import Framework
from search._src.frameworks import accepting as accepting_frameworks
from search._src.frameworks import get as framework
from search._src.kept_spaces import space_size
from search._src.methods.base import Method
from search._src.methods.base import Outcome
from search._src.methods.base import Problem
from search._src.methods.base import Scorer
from search._src.methods.calls import cut_dp
from search._src.methods.calls import enumerate_plans
from search._src.methods.calls import lower_bound
from search._src.methods.calls import random_search
from search._src.methods.calls import simulated_annealing
from search._src.methods.registry import METHODS
from search._src.methods.registry import get as method
from search._src.methods.run import run
from search._src.mixed import MixedResult
from search._src.mixed import layouts_planner
from search._src.mixed import mixed_cluster
from search._src.optimize import optimize
from search._src.relax import RelaxConfig
from search._src.result import SearchResult
from search._src.rules import rules_of_thumb
from search._src.sizing import ClusterOption
from search._src.sizing import SizingResult
from search._src.sizing import load_prices
from search._src.sizing import pareto
from search._src.sizing import plot_pareto
from search._src.sizing import size_cluster
from search._src.sizing_search import RelaxedSizing
from search._src.sizing_search import relaxed_front
from search._src.sizing_search import relaxed_sizing
from search._src.space import FAMILIES
from search._src.space import SpaceOptions
from search._src.space import default_families

__all__ = (
    "ClusterOption",
    "FamilyBound",
    "FAMILIES",
    "Framework",
    "METHODS",
    "Method",
    "MixedResult",
    "Outcome",
    "Problem",
    "RelaxConfig",
    "RelaxedSizing",
    "Scorer",
    "SearchResult",
    "SizingResult",
    "SpaceOptions",
    "accepting_frameworks",
    "cut_dp",
    "default_families",
    "enumerate_plans",
    "framework",
    "layouts_planner",
    "load_prices",
    "lower_bound",
    "method",
    "mixed_cluster",
    "optimize",
    "pareto",
    "plot_pareto",
    "random_search",
    "relaxed_front",
    "relaxed_sizing",
    "rules_of_thumb",
    "run",
    "simulated_annealing",
    "size_cluster",
    "space_size",
)
