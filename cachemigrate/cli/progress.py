"""What a person sees during ``migrate``: a progress bar on a terminal, a line per file that changes or fails, and a
closing summary table.

* On a terminal (stderr is a TTY), a tqdm bar counts the files on stderr; lines printed meanwhile go above it.
* Otherwise (a pipe, CI, pre-commit) there is no bar, only plain lines.
* Nothing is printed for a clean or skipped file, unless ``-v`` (then every file gets a line: its status, how it
  was answered — engine, prefilter, cache, skip comment — and its time). ``-q``: only diagnostics and errors.
* Diagnostics and diffs go to stdout; status lines, the bar and the summary to stderr.
* Colour (``--color``/``--no-color``; by default when stdout is a terminal and ``NO_COLOR`` is not set): diff
  lines, status words and diagnostic codes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Iterator

import click

STYLES = {
    "migrated": dict(fg="green", bold=True),
    "would migrate": dict(fg="yellow", bold=True),
    "failed": dict(fg="red", bold=True),
    "error": dict(fg="red", bold=True),
    "clean": dict(dim=True),
    "skipped": dict(fg="cyan"),
}
ANSWERED = {"engine": "by the engine", "prefilter": "by the prefilter", "cache": "from the cache",
            "skip comment": "by a skip comment"}  # fmt: skip
ROWS = (  # status, its row in the summary table (writing, not writing)
    ("migrated", "migrated", "would migrate"),
    ("failed", "left unchanged (diagnostics)", "left unchanged (diagnostics)"),
    ("clean", "nothing to migrate", "nothing to migrate"),
    ("skipped", "skipped (# cachemigrate: skip)", "skipped (# cachemigrate: skip)"),
    ("error", "internal errors", "internal errors"),
)


def color_default(stream: IO | None = None) -> bool:
    """Colour by default: the stream is a terminal, ``NO_COLOR`` is unset and the terminal is not dumb."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def colored_diff(diff: str) -> str:
    lines = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            lines.append(click.style(line, bold=True))
        elif line.startswith("@@"):
            lines.append(click.style(line, fg="cyan"))
        elif line.startswith("+"):
            lines.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            lines.append(click.style(line, fg="red"))
        else:
            lines.append(line)
    return "".join(lines)


class Reporter:
    def __init__(self, total: int, verbose: bool = False, quiet: bool = False, color: bool = False) -> None:
        self.total, self.verbose, self.quiet, self.color = total, verbose, quiet, color
        self.done = 0
        self.bar = None
        if not quiet and total > 1 and _is_terminal(sys.stderr):
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - a dependency; without it, plain lines
                tqdm = None
            if tqdm is not None:
                # a terminal that says it is 0x0 (some ptys) gets $COLUMNS x $LINES, else 80 x 24: tqdm draws
                # nothing in no room at all
                sized = _width(sys.stderr) > 0
                width = None if sized else _number("COLUMNS", 80)
                height = None if sized else _number("LINES", 24)
                # smoothing=0: the rate (so the ETA) is files done over time elapsed, not a moving average of the
                # last few files, which swings by hours when a burst of files the prefilter answers at once follows
                # files the engine took seconds on
                self.bar = tqdm(
                    total=total, unit="file", file=sys.stderr, leave=False, dynamic_ncols=sized, ncols=width,
                    nrows=height, smoothing=0,
                )  # fmt: skip

    def style(self, text: str, **style) -> str:
        return click.style(text, **style) if self.color else text

    @contextlib.contextmanager
    def _above_the_bar(self) -> Iterator[None]:
        if self.bar is None:
            yield
        else:
            with self.bar.external_write_mode(file=sys.stderr):
                yield

    def out(self, text: str, nl: bool = True) -> None:
        """Diagnostics and diffs, on stdout."""
        with self._above_the_bar():
            click.echo(text, nl=nl, color=self.color)

    def err(self, text: str) -> None:
        with self._above_the_bar():
            click.echo(text, err=True, color=self.color)

    def diagnostic(self, line: str) -> None:
        path, sep, rest = line.partition(": ")
        code, space, message = rest.partition(" ")
        if self.color and sep and code[:2].isalpha():
            line = f"{click.style(path, bold=True)}: {click.style(code, fg='red', bold=True)} {message}"
        self.out(line)

    def diff(self, diff: str) -> None:
        self.out(colored_diff(diff) if self.color else diff, nl=False)

    def file(self, path: str, status: str, verb: str, seconds: float, how: str) -> None:
        """One file is done: a line if it changes or fails (every file with -v), and the bar moves on."""
        self.done += 1
        if not self.quiet and (self.verbose or status not in ("clean", "skipped")):
            detail = f"{seconds:.1f}s, {how}" if self.verbose else f"{seconds:.1f}s"
            word = self.style(verb, **STYLES.get(verb, STYLES.get(status, {})))
            self.err(f"[{self.done}/{self.total}] {path}: {word} ({detail})")
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def summary(
        self, counts: dict[str, int], writes: bool, seconds: float, jobs: int, answered: dict[str, int]
    ) -> None:
        """The closing table: a row per status that occurred, and how the files were answered."""
        self.close()
        if self.quiet:
            return
        total = sum(counts.values())
        rows = [(label_w if writes else label_c, counts.get(status, 0), status) for status, label_w, label_c in ROWS]
        rows = [row for row in rows if row[1]] or [("files", 0, "clean")]
        width = max(len(label) for label, _, _ in rows)
        plural = "" if total == 1 else "s"
        lines = [f"cachemigrate: {total} file{plural} in {seconds:.1f}s (-j {jobs})"]
        for label, count, status in rows:
            verb = "would migrate" if status == "migrated" and not writes else status
            lines.append(f"  {self.style(label.ljust(width), **STYLES.get(verb, {}))}  {count:>5}")
        how = ", ".join(f"{answered[what]} {label}" for what, label in ANSWERED.items() if answered.get(what))
        if how:
            lines.append(f"  answered: {how}")
        click.echo("\n".join(lines), err=True, color=self.color)


def _is_terminal(stream: IO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def _width(stream: IO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _number(variable: str, default: int) -> int:
    value = os.environ.get(variable, "")
    return int(value) if value.isdigit() and int(value) > 0 else default
