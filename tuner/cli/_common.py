"""Small helpers shared by the CLI commands."""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Iterable
from typing import Any

import typer

__all__ = ["echo", "echo_table", "echo_wide", "progress_bar", "set_verbosity", "terminal_width"]


def echo(text: str = "") -> None:
    typer.echo(text)


def terminal_width() -> int:
    """The terminal's width; when piped, $COLUMNS or 120 (a CI log, a pager)."""
    return shutil.get_terminal_size((120, 24)).columns


def echo_table(rows: list[dict[str, object]], *, floats: str = "{:,.1f}", width: int | None = None) -> None:
    """Rows as a rich table: plain text when piped or with NO_COLOR (rich's own rules). With
    ``width`` the table fits it: text columns are cut with an ellipsis, numbers never; without,
    it is never wrapped or cut to a terminal width it does not have (``tune trials``)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    cells = [[_cell(row.get(name), floats) for name in columns] for row in rows]
    numeric = [all(isinstance(r.get(name), (int, float)) or r.get(name) is None for r in rows) for name in columns]
    keep = [numeric[i] or name in ("state", "#") or _numeric_text(c[i] for c in cells) for i, name in enumerate(columns)]
    widths = (
        _fit([len(name) for name in columns], [max([0, *(len(c[i]) for c in cells)]) for i in range(len(columns))], keep, width)
        if width
        else None
    )
    for i, name in enumerate(columns):
        table.add_column(
            name,
            justify="right" if numeric[i] else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=widths[i] if widths else None,
        )
    for row in cells:
        table.add_row(*row)
    if width:
        console = Console(width=width, highlight=False)
    else:
        console = Console(width=None if sys.stdout.isatty() else 100_000, soft_wrap=True, highlight=False)
    console.print(table)


def echo_wide(rows: list[dict[str, object]], *, lead: list[str], groups: list[list[str]], width: int) -> None:
    """Rows within ``width`` with every header in full and nothing cut: one table where all
    columns fit, else each of the ``groups`` of columns (results, then parameters) in as many
    tables as it takes, each led by the ``lead`` columns; the ``note`` column then goes under
    the tables, wrapped, one line per row that has a note."""
    import textwrap

    columns = [name for group in [lead, *groups] for name in group]
    noted = [r for r in rows if r.get("note")]
    size = {name: max([len(name), *(len(_cell(r.get(name), "{:,.1f}")) for r in rows)]) for name in [*columns, "note"]}
    whole = [*columns, "note"] if noted else columns
    if _span(whole, size) <= width:
        echo_table([{k: r.get(k) for k in whole} for r in rows])
        return
    tables: list[list[str]] = []
    for group in groups:
        for i, name in enumerate(group):
            if i and _span([*tables[-1], name], size) <= width:
                tables[-1].append(name)
            else:
                tables.append([*lead, name])
    for n, names in enumerate(tables):
        if n:
            echo()
        echo_table([{k: r.get(k) for k in names} for r in rows], width=width)
    if noted:
        echo("\nnotes:")
        for r in noted:
            head = "  " + " ".join(str(r.get(k)) for k in lead) + ": "
            echo(textwrap.fill(str(r["note"]), width, initial_indent=head, subsequent_indent=" " * 6, break_on_hyphens=False))


def _span(names: list[str], size: dict[str, int], gap: int = 3) -> int:
    """Characters a table of these columns takes: each as wide as its widest cell or header."""
    return sum(size[name] for name in names) + gap * (len(names) - 1)


def _fit(headers: list[int], cells: list[int], keep: list[bool], width: int, gap: int = 3) -> list[int]:
    """Column widths within ``width``: kept columns (numbers, state) never narrower than their
    cells, their headers cut first (to 12 characters, 8, then 4); the other columns share
    what is left, the narrow ones whole and the wide ones cut evenly."""
    flexible = sorted((i for i, k in enumerate(keep) if not k), key=lambda i: max(headers[i], cells[i]))
    for header_cap in (None, 12, 8, 4):
        widths = [max(c, h if header_cap is None else min(h, header_cap)) for h, c in zip(headers, cells, strict=True)]
        left = width - gap * (len(widths) - 1) - sum(w for w, k in zip(widths, keep, strict=True) if k)
        if left >= sum(min(8, max(headers[i], cells[i])) for i in flexible):
            break
    for n, i in enumerate(flexible):
        share = max(1, left // (len(flexible) - n))
        widths[i] = min(max(headers[i], cells[i]), share)
        left -= widths[i]
    return widths


def _numeric_text(values: Iterable[str]) -> bool:
    """A column of formatted numbers (``4,147.0 +-405``, ``0.0202``): cut, it would lie."""
    return all(
        not v or v.replace(",", "").replace(".", "").replace("+-", "").replace(" ", "").replace("-", "").isdigit() for v in values
    )


def _cell(value: object, floats: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return floats.format(value)
    return str(value)


def set_verbosity(verbose: int) -> None:
    """The tuner's log level, and Optuna's own (its handler prints INFO lines of its own, such as
    "A new study created in memory", in the middle of a command's output): WARNING unless -v."""
    import optuna

    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.getLogger("tuner").setLevel(level)
    optuna.logging.set_verbosity(max(level, logging.INFO) if verbose > 0 else logging.WARNING)


class _ProvisionBar:
    """rich's progress bar for long provisioning steps (the llama.cpp build), on stderr: live on
    a terminal; when piped, rich prints the final state once, no control characters."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, fraction: float, line: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        if self._bar is None:
            self._bar = Progress(
                TaskProgressColumn(), BarColumn(), TextColumn("{task.description}"), console=Console(stderr=True)
            )
            self._bar.start()
            self._task = self._bar.add_task(line[:70], total=1.0)
        self._bar.update(self._task, completed=min(max(fraction, 0.0), 1.0), description=line[:70])
        if fraction >= 1.0:
            self._bar.stop()
            self._bar = None


progress_bar = _ProvisionBar()
