"""rlcost's layout search: relaxation, optax optimisation, rounding, baselines."""
