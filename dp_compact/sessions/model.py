"""The value types of a conversation, kept importable here; they live in :mod:`dp_compact.conversation`."""

from dp_compact.conversation import (
    CompactingTool,
    Message,
    MessageKind,
    RecordedCompaction,
    Role,
    SeedStats,
    Session,
    ToolCall,
    ToolResult,
    Usage,
)

__all__ = ["Message", "RecordedCompaction", "SeedStats", "Session", "ToolCall", "ToolResult", "Usage"]
