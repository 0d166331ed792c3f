"""The text dp-compact writes into a compacted conversation, loaded from ``prompts.toml``.

Headings of the summary sections, the section markers of the summary message and the
assistant acknowledgement live in that one package-data file so that a summarizer (the
extractive one here, an LLM one elsewhere) and the reassembly agree on them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["SECTION_KEYS", "Texts", "parse_sections", "render_sections", "texts"]

#: Section keys of the summary, in the order they are written (``prompts.toml`` [summary.sections]).
_BULLET = re.compile(r"^\s*[-*•]\s+")
SECTION_KEYS = ("requests", "goals", "instructions", "changed", "files", "commands", "errors", "decisions", "open_items", "tools")


@dataclass(frozen=True, slots=True)
class Texts:
    """The parsed ``prompts.toml``: markers, intro and archive lines, section headings, acknowledgement."""

    marker: str
    anchors_marker: str
    archive_marker: str
    intro: str
    kept: str
    recorded_model: str
    recorded_window: str
    recorded_avg: str
    recorded_ratio: str
    recorded_prefix: str
    recorded_writes: str
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
        kept=summary["kept"],
        recorded_model=summary["recorded_model"],
        recorded_window=summary["recorded_window"],
        recorded_avg=summary["recorded_avg"],
        recorded_ratio=summary["recorded_ratio"],
        recorded_prefix=summary["recorded_prefix"],
        recorded_writes=summary["recorded_writes"],
        archive_line=summary["archive_line"],
        no_archive_line=summary["no_archive_line"],
        headings={key: summary["sections"][key] for key in SECTION_KEYS},
        acknowledgement=data["acknowledgement"]["text"],
    )


def parse_sections(summary_text: str) -> dict[str, list[str]]:
    """The bullet items under each known heading of a summary written by :func:`render_sections`."""
    headings = {heading: key for key, heading in texts().headings.items()}
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in summary_text.splitlines():
        if line.strip() in headings:
            current = headings[line.strip()]
            out.setdefault(current, [])
        elif current is not None and _BULLET.match(line):
            out[current].append(_BULLET.sub("", line).strip())
        elif line.strip():
            current = None
    return out


def render_sections(sections: dict[str, Sequence[str]]) -> str:
    """Sections as text: heading line, ``- item`` lines, a blank line between sections."""
    headings = texts().headings
    blocks = [
        "\n".join([headings[key], *(f"- {item}" for item in sections[key])]) for key in SECTION_KEYS if sections.get(key)
    ]
    return "\n\n".join(blocks)
