"""Plain text tables that fit the terminal, with the standard library alone.

A listing is read at 80 columns as often as at 200: no cell that names something
(a run id, a workflow, a status) is ever cut. When the row does not fit, the
least important columns are left out, one by one, and the one flexible column
(an error's first line, a worker's queues) takes the room left, cut with "…"
where it must be. Colour only on a terminal, and never with NO_COLOR set.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

#: ANSI SGR codes for the styles the CLI uses.
_SGR = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
GAP = "  "
#: The width of a listing when stdout is no terminal and COLUMNS is unset (a pipe).
PIPE_WIDTH = 160


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    #: Which columns go first when a row does not fit: the lowest ``keep``; None never.
    keep: int | None = None
    #: Takes the room left, cut with "…"; left out when less than ``least`` is left.
    flex: bool = False
    least: int = 12
    right: bool = False


#: A cell: its text, or its text and a style name (bold, dim, red, green, …).
Cell = str | tuple[str, str]


def width() -> int:
    """The terminal's width (COLUMNS first); PIPE_WIDTH for a pipe."""
    return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns


#: NO_COLOR was set (the CLI's entry point reads it: ``no_colour``).
_NO_COLOUR = False


def no_colour(asked: bool) -> None:
    """Colour nothing when ``asked`` (NO_COLOR is set)."""
    global _NO_COLOUR
    _NO_COLOUR = asked


def colour() -> bool:
    """Whether to colour: stdout is a terminal and NO_COLOR is not set."""
    return sys.stdout.isatty() and not _NO_COLOUR


def paint(text: str, style: str, on: bool | None = None) -> str:
    """``text`` in ``style`` (ANSI) when colouring; as it is otherwise."""
    if not style or not (colour() if on is None else on):
        return text
    codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
    return f"\x1b[{codes}m{text}\x1b[0m" if codes else text


def _text(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)].rstrip() + "…"


def table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    *,
    columns_wide: int | None = None,
    on: bool | None = None,
) -> list[str]:
    """The table's lines (a bold header, then one line per row), fitted to ``columns_wide``
    (default: the terminal's width)."""
    room = columns_wide or width()
    natural = [
        max([len(c.header), *(len(_text(row[i])) for row in rows)]) for i, c in enumerate(columns)
    ]
    shown = list(range(len(columns)))

    def needed() -> int:
        fixed = [natural[i] for i in shown if not columns[i].flex]
        flex = [min(columns[i].least, natural[i]) for i in shown if columns[i].flex]
        return sum(fixed) + sum(flex) + len(GAP) * (len(shown) - 1)

    while needed() > room:
        flexible = [i for i in shown if columns[i].flex]
        droppable = [i for i in shown if columns[i].keep is not None]
        if flexible:
            shown.remove(flexible[0])
        elif droppable:
            shown.remove(min(droppable, key=lambda i: columns[i].keep or 0))
        else:
            break  # every column left names something: wider than the terminal, uncut
    widths = {i: natural[i] for i in shown}
    for i in shown:
        if columns[i].flex:
            others = sum(w for j, w in widths.items() if j != i)
            widths[i] = max(1, min(natural[i], room - others - len(GAP) * (len(shown) - 1)))

    def line(cells: Sequence[Cell], header: bool = False) -> str:
        parts = []
        for n, i in enumerate(shown):
            cell = cells[i]
            text, style = (cell, "") if isinstance(cell, str) else cell
            text = _cut(text, widths[i])
            last = n == len(shown) - 1
            pad = widths[i] - len(text)
            if columns[i].right:
                text = " " * pad + paint(text, "bold" if header else style, on)
            else:
                text = paint(text, "bold" if header else style, on) + ("" if last else " " * pad)
            parts.append(text)
        return GAP.join(parts).rstrip()

    return [line([c.header for c in columns], header=True), *(line(row) for row in rows)]
