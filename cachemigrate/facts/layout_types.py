"""The data of a cache layout (what :mod:`cachemigrate.facts.layout` reads off an attention), shared by the modules
that compute it so that none imports another for its types."""

from __future__ import annotations

import dataclasses

import libcst as cst


class Unknown(Exception):
    """The code does not show the layout; the message says what is missing, for users. ``explained``: the cause is
    a construct that the legacy audit names itself, at its own line (:mod:`cachemigrate.facts.constructs`)."""

    def __init__(self, message: str, explained: bool = False, node: cst.CSTNode | None = None) -> None:
        super().__init__(message)
        self.explained = explained
        self.node = node  # the construct that blocked, where the code shows one (the diagnostic points at it)


@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """One cached tensor: its rank (None: not known), its sequence axis (negative), and, when its first axis
    merges batch and heads, the heads factor as code of the attention (``self.num_heads``)."""

    rank: int | None
    seq: int
    heads: str | None = None

    @property
    def standard(self) -> bool:
        return self.heads is None and self.seq == -2

    def unmerged(self) -> "TensorLayout":
        """The same tensor with its first axis split into batch and heads."""
        rank = self.rank + 1 if self.rank is not None else None
        return TensorLayout(rank, self.seq, None)

    def describe(self) -> str:
        labels = self.labels()
        return "[" + ", ".join(labels) + "]" if labels else f"sequence axis {self.seq}"

    def labels(self) -> list[str] | None:
        """Axis names (``b*h``, ``h``, ``s``, ``d``...), where the rank is known."""
        if self.rank is None:
            return None
        others = ["b*h", "d"] if self.heads else (["b", "h", "d"] if self.rank == 4 else ["b", "d"])
        others = others[: self.rank - 1] if len(others) >= self.rank - 1 else None
        if others is None or len(others) != self.rank - 1:
            return None
        axis = self.seq % self.rank
        return others[:axis] + ["s"] + others[axis:]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The layout of one layer's cache in an attention: a pair of tensors, or one fused tensor (``key`` is then
    the fused tensor, split in two equal halves on its last axis; ``value`` is the same)."""

    form: str  # "pair" | "fused"
    key: TensorLayout
    value: TensorLayout
    through: str = "inline"  # "helper": concatenated in a projection helper nested in the attention
    # where the attention reads its past through a swap of axes (`past[0].transpose(-2, -1)`): the layout of the
    # tensors as stored, which the model takes and gives back (``key``/``value`` are those it concatenates)
    stored: "Layout | None" = None

    @property
    def standard(self) -> bool:
        return self.form == "pair" and self.key.standard and self.value.standard and self.stored is None

    def describe(self) -> str:
        if self.form == "fused":
            return f"keys and values fused in one tensor ({self.key.describe()}, halves on the last axis)"
        return f"keys {self.key.describe()}, values {self.value.describe()}"
