"""rlcost's layout search: relaxation, optax optimisation, rounding, baselines."""

from search import export

__all__ = ("export",)
