"""Text cells of the CSV files devicefit writes, safe to open in a spreadsheet.

A model name, hostname or device name comes from a landing file that another machine wrote: a
cell starting with `=`, `+`, `-` or `@` (or a tab or carriage return before one) is a formula to
Excel, LibreOffice and Google Sheets, quoted or not (`=HYPERLINK(...)`, `=cmd|...`). Such a text
cell is written with a leading apostrophe, which the spreadsheet shows as text, and devicefit's
own readers of its CSVs (baselines) take the apostrophe off again, so the stored name is unchanged
and a CSV read back names the same configs. A text starting with an apostrophe gets one more, so
the round trip is exact for every text."""
from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_text(value: str) -> str:
    """A text cell as written: inert in a spreadsheet (numbers are written by the caller as numbers)."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def read_spreadsheet_text(cell: str) -> str:
    """The text a cell written by `spreadsheet_text` held."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell
