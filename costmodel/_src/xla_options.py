"""XLA options of the cost model's compiled programs.

The cost model is a large graph of scalar arithmetic (some 12,000 operations
with its gradient) usually run on small batches, so compilation, not
execution, dominates a program that runs a few times (an inference of a
missing input, a calibration, a search's relaxed loop). Results agree with
XLA's default options to float32 rounding (1-2e-7 relative in a step time).
Other backends than the CPU ignore the CPU option.
"""

from __future__ import annotations

# Programs that run little (the search's relaxed loop and few full estimates,
# the calibration's objective, the anchors' stage times).
# ``xla_cpu_use_fusion_emitters=False`` compiles each fusion with XLA's classic
# elemental emitter instead of the MLIR fusion emitters, and backend
# optimisation level 0 skips LLVM's optimisation: the classic emitters halve
# the relaxed loop's compilation (already at level 0 before), both together
# cut the exact evaluator's about 7x, for slower
# execution (the exact scorer of enumerations, 16,384-row chunks, keeps the
# defaults: there the classic emitters halve the throughput).
FAST_COMPILE = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}

# Forward programs run many times (the search's exact evaluator, its relaxed
# step by finite differences): the classic emitters at backend optimisation
# level 1, about half the compile time of XLA's defaults and 2-2.5x the
# throughput of level 0 (measured values in :mod:`search._src.evaluate` and
# :mod:`search._src.relax`).
FORWARD = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}
