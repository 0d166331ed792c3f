"""The compaction pipeline of DESIGN §5: split, shrink, anchors, summarize, archive, reassemble, validate; clear (§9).

One module per stage; :func:`compact_file` runs them end to end. Pure stages map values to
values; :mod:`.compact`, :mod:`.io`, :mod:`.breaker` and :mod:`.archive` are the IO shell.
Names are imported on first use (PEP 562), so importing one stage (``.archive`` for
``dp-compact restore``) does not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Anchor",
    "Archiver",
    "CircuitBreaker",
    "ClearResult",
    "CompactionResult",
    "ExtractiveSummarizer",
    "Summarizer",
    "SummaryRequest",
    "Violation",
    "clear_file",
    "clear_messages",
    "clear_session",
    "compact_file",
    "compact_session",
    "cut_for_keep",
    "preview",
    "reassemble",
    "select_anchors",
    "shrink_file",
    "shrink_messages",
    "shrink_session",
    "split",
    "validate_file",
    "validate_messages",
]

_WHERE = {
    "select_anchors": "anchors", "CircuitBreaker": "breaker",
    "ClearResult": "clear", "clear_file": "clear", "clear_messages": "clear", "clear_session": "clear",
    "CompactionResult": "compact", "compact_file": "compact", "compact_session": "compact",
    "shrink_file": "io", "validate_file": "io", "reassemble": "reassemble",
    "preview": "shrink", "shrink_messages": "shrink", "shrink_session": "shrink",
    "cut_for_keep": "split", "split": "split",
    "ExtractiveSummarizer": "summarize", "Summarizer": "summarize", "SummaryRequest": "summarize",
    "Anchor": "types", "Archiver": "types", "Violation": "types", "validate_messages": "validate",
}

if TYPE_CHECKING:
    from dp_compact.pipeline.anchors import select_anchors
    from dp_compact.pipeline.breaker import CircuitBreaker
    from dp_compact.pipeline.clear import ClearResult, clear_file, clear_messages, clear_session
    from dp_compact.pipeline.compact import CompactionResult, compact_file, compact_session
    from dp_compact.pipeline.io import shrink_file, validate_file
    from dp_compact.pipeline.reassemble import reassemble
    from dp_compact.pipeline.shrink import preview, shrink_messages, shrink_session
    from dp_compact.pipeline.split import cut_for_keep, split
    from dp_compact.pipeline.summarize import ExtractiveSummarizer, Summarizer, SummaryRequest
    from dp_compact.pipeline.types import Anchor, Archiver, Violation
    from dp_compact.pipeline.validate import validate_messages


def __getattr__(name: str) -> Any:
    """Import ``name`` from its stage module on first use."""
    if name not in _WHERE:
        raise AttributeError(f"module 'dp_compact.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dp_compact.pipeline.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names, including those not imported yet."""
    return sorted(set(globals()) | set(__all__))
