"""The probe's checks, one function each, registered in :data:`REGISTRY` (see :mod:`.registry`).

The modules are imported in table order; a new group of checks is a new module added to this list.
"""

from . import forward, cache_api, generate, outputs, attention, training, calls, static, cross, composite  # noqa: F401
from .registry import REGISTRY, Check, check

CHECK_NAMES = tuple(REGISTRY)

__all__ = ["CHECK_NAMES", "REGISTRY", "Check", "check"]
