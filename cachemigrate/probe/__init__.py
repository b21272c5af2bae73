"""Equivalence probe: run an ORIGINAL and a MIGRATED modeling file side by side and compare them.

Both files are imported (:mod:`.loading`), a tiny random model is built from the file's config class (:mod:`.tiny`,
:mod:`.models`) with a fixed seed, and one state_dict is loaded into the original-module model and the
migrated-module model. The checks (:mod:`.checks`, one function each, listed in :data:`CHECK_NAMES`) then feed both
the same inputs and compare the outputs (:mod:`.compare`), bit for bit unless a check says otherwise. :mod:`.run`
sets up and runs them, :mod:`.report` prints the table and the summary.

torch and transformers are imported lazily, inside functions: importing this package is cheap.
"""

from .checks import CHECK_NAMES, REGISTRY, Check, check
from .compare import CheckFailed, CheckSkipped, structure_diff, tensor_diff
from .context import Probe
from .loading import ProbeSetupError, load_modeling_module, packages_for, unload_module
from .models import ModelClasses, discover
from .report import CheckResult, exit_status, format_table, summary_line
from .run import run_probe
from .tiny import tiny_config

__all__ = [
    "CHECK_NAMES",
    "REGISTRY",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "ModelClasses",
    "Probe",
    "ProbeSetupError",
    "check",
    "discover",
    "exit_status",
    "format_table",
    "load_modeling_module",
    "packages_for",
    "run_probe",
    "structure_diff",
    "summary_line",
    "tensor_diff",
    "tiny_config",
    "unload_module",
]
