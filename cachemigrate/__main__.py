"""``python -m cachemigrate``: the same as the ``cachemigrate`` command."""

from .cli.main import entry

entry()
