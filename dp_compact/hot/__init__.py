"""The hot path of ``dp-compact plan FILE`` and ``dp-compact hook``: a new call costs what was appended.

- :mod:`~dp_compact.hot.transcript`: a Claude Code transcript read from where the kept reader
  state stopped (the bytes read so far hashed: any change but an append reads the whole file).
- :mod:`~dp_compact.hot.lines`: the same for Anthropic messages JSONL, Codex rollouts, OpenAI chat
  JSONL and Gemini CLI stream-json (their readers in ``codex_lines``, ``openai_lines`` and
  ``gemini_lines``, what they share in ``common_lines``).
- :mod:`~dp_compact.hot.document`: a file that is one JSON document (rewritten whole after each
  call: Cline's API history, SWE-agent and mini-swe-agent trajectories, ``{"messages": [...]}``,
  ATIF) read whole by the application's reader, from a kept state that says only so: a run is
  spared the application's imports and settings (and, in the plan server, its process), and the
  per-text work is remembered by text (token cache, memos).
- :mod:`~dp_compact.hot.state`: where that state is kept (user cache directory), with the
  settings and prices of the run, and when it is current (same code, same ``DP_*`` and ``.env``).
- :mod:`~dp_compact.hot.settings`: the kept settings, without pydantic.
- :mod:`~dp_compact.hot.main`: the ``dp-compact`` entry point that uses them, else runs the Typer application.
- :mod:`~dp_compact.hot.server`, :mod:`~dp_compact.hot.client`: the plan server, a resident
  process that keeps the warm run's modules imported and runs it for the entry point
  (``NO_DP_COMPACT_SERVER=1``: none asked or started).

Trade-offs: only JSONL files of Claude Code, Codex, Anthropic messages, OpenAI chat and Gemini CLI
stream-json are continued (one JSON document is read whole each time, from its kept state; JSONL
files of other formats by the application each time); the ``PreCompact`` hook reads its
transcript whole (the archive holds each message's source, which the kept state does not) and is
spared the imports and settings of a new process only; the state is one pickle (a quarter of a
Claude Code transcript's size; about the size of the messages' text for the others),
rewritten after each run that read something new; a record written before its parent across
two runs makes the second read the whole file. Importing this package loads nothing.
"""

__all__: list[str] = []
