"""The compaction pipeline of DESIGN §5: split, shrink, anchors, summarize, archive, reassemble, validate.

One module per stage; :func:`compact_file` runs them end to end. Pure stages map values to
values; :mod:`.compact`, :mod:`.io`, :mod:`.breaker` and :mod:`.archive` are the IO shell.
"""

from dp_compact.pipeline.anchors import select_anchors
from dp_compact.pipeline.breaker import CircuitBreaker
from dp_compact.pipeline.compact import CompactionResult, compact_file, compact_session
from dp_compact.pipeline.io import shrink_file, validate_file
from dp_compact.pipeline.reassemble import reassemble
from dp_compact.pipeline.shrink import preview, shrink_messages, shrink_session
from dp_compact.pipeline.split import cut_for_keep, split
from dp_compact.pipeline.summarize import ExtractiveSummarizer, Summarizer, SummaryRequest
from dp_compact.pipeline.types import Anchor, Archiver, Violation
from dp_compact.pipeline.validate import validate_messages

__all__ = [
    "Anchor",
    "Archiver",
    "CircuitBreaker",
    "CompactionResult",
    "ExtractiveSummarizer",
    "Summarizer",
    "SummaryRequest",
    "Violation",
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
