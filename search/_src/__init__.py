"""Implementation of the layout search (private; use the ``search`` package).

Its modules stand on layers, lowest first; a module imports modules of its
own layer or of lower ones, never of a higher one, and the imports hold no
cycle (``tests/test_architecture.py`` checks both on every module):

1. support: compiled-program options, the one in-memory cache of compiled
   programs and the traced programs on disk, devices and cores, progress,
   finite differences, ranked results;
2. space: a family's variables, structure, validity and relaxed transform,
   its relaxed objective, the valid space's product view, the framework
   records and the spaces kept per process, the relaxed sizing space;
3. scorer: the exact programs, the shared space of several families, stage
   tables and the evaluator that owns them;
4. method parts: the relaxed loop, rounding and local moves, block sweeps,
   the cut tree, a baseline's run;
5. methods: the baselines, the cut DP, the bound, the rules of thumb, the
   gradient search, speculative decoding as an option, cluster sizing and
   mixed GPU types;
6. front ends: the command lines, framework settings and reports.
"""

LAYERS = (
    ("compile_cache", "program_cache", "trace_cache", "sharding", "progress", "differences",
     "result"),
    ("space_options", "space_structure", "space_relaxed", "space_validity", "space",
     "valid_space", "relaxed_objective", "frameworks", "kept_spaces", "sizing_relax"),
    ("exact_programs", "shared", "stage_tables", "evaluate"),
    ("relax", "shared_relax", "rounding", "block_sweep", "cut_tree", "baseline_run"),
    ("cut_dp", "bound", "rules", "family_search", "speculative_option", "optimize",
     "sizing", "mixed", "sizing_search", "methods"),
    ("framework_settings", "cli_help", "cli", "report", "html_report"),
)
"""The layers above, lowest first: module names under ``search._src`` (a
package's name covers its modules)."""
