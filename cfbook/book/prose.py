"""The book's prose, counted from its executed notebooks: what a reader reads, so that the book's
length is a measured budget rather than an impression."""

from __future__ import annotations

import re

import nbformat

__all__ = ["PROSE_BUDGET", "prose_words"]

#: The most words of prose the whole book (chapters and notebook appendices) may have.
PROSE_BUDGET = 18_000
_FENCED = re.compile(r"```.*?```", re.S)
_WORD = re.compile(r"[A-Za-z0-9][^\s]*")


def _is_table_line(line: str) -> bool:
    return line.lstrip().startswith("|")


def prose_words(nb: nbformat.NotebookNode) -> int:
    """Words in the markdown cells (fenced code left out) and in the text the code cells print
    or render as Markdown; table rows are data, not prose, and are not counted."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(_FENCED.sub("", cell.source))
        for output in cell.get("outputs", []):
            markdown = output.get("data", {}).get("text/markdown")
            if markdown is not None:
                parts.append(markdown)
            elif output.get("name") == "stdout":
                parts.append(output.get("text", ""))
    lines = [line for part in parts for line in part.splitlines() if not _is_table_line(line)]
    return len(_WORD.findall("\n".join(lines)))
