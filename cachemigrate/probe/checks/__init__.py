"""The probe's checks, one function each, registered in :data:`REGISTRY` (see :mod:`.registry`).

The modules are imported in table order; a new group of checks is a new module added to this list.
"""

from . import forward
from . import cache_api
from . import generate
from . import outputs
from . import attention
from . import training
from . import calls
from . import static
from . import cross
from . import composite
from .registry import REGISTRY, Check, check

CHECK_NAMES = tuple(REGISTRY)

__all__ = ["CHECK_NAMES", "REGISTRY", "Check", "check"]
