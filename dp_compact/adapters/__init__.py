"""Adapters that put the planner and the pipeline inside agent frameworks (optional extras).

- :mod:`.langchain`: ``DpCompactMiddleware`` for LangChain 1.x ``create_agent`` (extra ``langchain``);
- :mod:`.pydantic_ai`: ``DpCompactProcessor``, a pydantic-ai history processor (extra ``pydantic-ai``);
- :mod:`.claude_code_hook`: ``dp-compact hook``, Claude Code's status line and ``PreCompact`` hook;
- :mod:`.mcp_server`: ``dp-compact mcp``, tools ``plan``, ``recall`` and ``restore`` over stdio (extra ``mcp``);
- :mod:`.live`: the shared step, a framework's messages read as a session;
- :mod:`.transcript`: what the adapters keep of each conversation between calls;
- :mod:`.recall`: the recall tools' search and restore over the archive (framework-free);
- :mod:`.native`: provider-native context actions (Anthropic context management, OpenAI's compact
  endpoint): their request parameters and billing.

Importing this package loads none of the frameworks; each module imports its own.
"""

from __future__ import annotations

from dp_compact.errors import MissingExtraError

__all__ = ["MissingExtraError"]
