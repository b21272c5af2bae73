"""How the engine re-lays out edited code (:class:`cachemigrate.edit.apply.Reformat`): black, for edited code that
no longer fits the line length or that black would now lay out differently where it left the original alone."""

from __future__ import annotations

import libcst as cst

from .apply import Reformat
from .render import format_statements


class Formatter(Reformat):
    """Black for edited code that no longer fits the line length, or that black would now lay out differently where
    it laid out the original as it was (a black-clean file stays black-clean); other code is kept as it is."""

    def __init__(self, line_length: int) -> None:
        self.line_length = line_length

    def _fits(self, code: str, depth: int) -> bool:
        return max(len(line) for line in code.splitlines()) + 4 * depth <= self.line_length

    def _keeps(self, code: str, original: str | None, depth: int) -> bool:
        """The edited code can stay as it is: it fits, and black leaves it alone or never left the original alone."""
        if not self._fits(code, depth):
            return False
        if original is None or format_statements(code, depth, self.line_length) == code:
            return True
        return format_statements(original, depth, self.line_length) != original

    def statement(self, stmt: cst.SimpleStatementLine, depth: int, original=None) -> cst.SimpleStatementLine:
        code = _code(stmt.with_changes(leading_lines=[]))
        before = _code(original.with_changes(leading_lines=[])) if original is not None else None
        if self._keeps(code, before, depth):
            return stmt
        formatted = cst.parse_statement(format_statements(code, depth, self.line_length))
        return formatted.with_changes(leading_lines=stmt.leading_lines)

    def header(self, compound: cst.BaseCompoundStatement, depth: int, original=None) -> cst.BaseCompoundStatement:
        code = _stub(compound)
        before = _stub(original) if original is not None else None
        if self._keeps(code, before, depth):
            return compound
        formatted = cst.parse_statement(format_statements(code, depth, self.line_length))
        if type(formatted) is not type(compound):
            return compound
        if isinstance(compound, cst.FunctionDef):
            return compound.with_changes(
                params=formatted.params,
                whitespace_before_params=formatted.whitespace_before_params,
                whitespace_before_colon=formatted.whitespace_before_colon,
                returns=formatted.returns,
            )
        return compound.with_changes(test=formatted.test, whitespace_before_test=formatted.whitespace_before_test)


def _code(stmt: cst.CSTNode) -> str:
    return cst.Module(body=[stmt]).code


def _stub(compound: cst.BaseCompoundStatement) -> str:
    """The header of a compound statement over a ``pass`` body (what black is asked about)."""
    stub = compound.with_changes(
        body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]), leading_lines=[], **_no_extras(compound)
    )
    return _code(stub)


def _no_extras(compound: cst.BaseCompoundStatement) -> dict:
    """A stub of a compound statement has no decorators and no ``else``."""
    if isinstance(compound, cst.FunctionDef):
        return {"decorators": []}
    return {"orelse": None}
