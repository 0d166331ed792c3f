"""The text dp-compact writes into a compacted conversation, loaded from ``prompts.toml``.

Headings of the summary sections, the section markers of the summary message and the
assistant acknowledgement live in that one package-data file so that a summarizer (the
extractive one here, an LLM one elsewhere) and the reassembly agree on them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["SECTION_KEYS", "Texts", "texts"]

#: Section keys of the summary, in the order they are written (``prompts.toml`` [summary.sections]).
SECTION_KEYS = ("goals", "instructions", "files", "commands", "errors", "decisions", "open_items")


@dataclass(frozen=True, slots=True)
class Texts:
    """The parsed ``prompts.toml``: markers, intro and archive lines, section headings, acknowledgement."""

    marker: str
    anchors_marker: str
    archive_marker: str
    intro: str
    archive_line: str
    no_archive_line: str
    headings: dict[str, str]
    acknowledgement: str


@cache
def texts() -> Texts:
    """The package's prompt texts (read once)."""
    data = tomllib.loads(resources.files("dp_compact.pipeline").joinpath("prompts.toml").read_text("utf-8"))
    summary = data["summary"]
    return Texts(
        marker=summary["marker"],
        anchors_marker=summary["anchors_marker"],
        archive_marker=summary["archive_marker"],
        intro=summary["intro"],
        archive_line=summary["archive_line"],
        no_archive_line=summary["no_archive_line"],
        headings={key: summary["sections"][key] for key in SECTION_KEYS},
        acknowledgement=data["acknowledgement"]["text"],
    )
