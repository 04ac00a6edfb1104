"""The repository and the results folder of a benchmark, without TensorFlow.

What `common` and the speed check (`compare`, which starts every benchmark
in a process of its own and needs no TensorFlow itself) share; the CPU a
result names is `verification.machine`'s.
"""

import os
import tempfile

# The repository root: the scripts run there (`python -m benchmarks.X`).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Results and data go to the temp folder, never into the work tree.
RESULTS_DIR = os.path.join(tempfile.gettempdir(), "tf1_benchmarks")
