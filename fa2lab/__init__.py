"""The lab around the library: everything that measures, records and reports the kernels of fa2triton.

Here: the harness shapes and FLOP count, result files and their provenance, the lab's kernel switches, timers,
the configuration sweeps and the picks made from them, the article's protocol, the peers timed beside the versions,
offline compiles. The lab imports the runtime (fa2triton), never the reverse (tests/test_import_layers.py).
"""

__all__ = [
    "autotuning",
    "backward_sweep",
    "compile_offline",
    "forward_sweep",
    "nonsquare",
    "paths",
    "peers",
    "pick",
    "protocol",
    "provenance",
    "results",
    "shapes",
    "switches",
    "timers",
]
