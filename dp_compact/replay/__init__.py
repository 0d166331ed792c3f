"""Replay: what a recorded session would have cost, call by call, under each compaction policy.

- :mod:`~dp_compact.replay.recording`: the recording replayed and the replay's parameters;
- :mod:`~dp_compact.replay.context`: what a policy sees (the live conversation, the call) and answers;
- :mod:`~dp_compact.replay.meter`: the pure cost meter (cache, compactions, lost information);
- :mod:`~dp_compact.replay.policies`: dp_compact's planner, the fixed rules of other tools, a schedule;
- :mod:`~dp_compact.replay.oracle`: the hindsight-optimal schedule (backward dynamic programming);
- :mod:`~dp_compact.replay.events` and :mod:`~dp_compact.replay.receipts`: what the meter records of each
  compaction and refetch, and each compaction's receipt (cost, saving, payback, what it dropped that was used again);
- :mod:`~dp_compact.replay.shell`: reading sessions, evidence, folders (the tables are drawn by :mod:`dp_compact.cli.render`).
"""

from dp_compact.replay.meter import (
    FIXED_RECORDING,
    LOSS_MODES,
    REFETCH_OUTPUT_TOKENS,
    CallContext,
    Compaction,
    Live,
    Policy,
    PolicyResult,
    Recording,
    ReplayParams,
    make_recording,
    prefix_floor_usd,
    replay,
    tail_cut_mask,
    truncation,
)

__all__ = [
    "FIXED_RECORDING",
    "LOSS_MODES",
    "REFETCH_OUTPUT_TOKENS",
    "CallContext",
    "Compaction",
    "Live",
    "Policy",
    "PolicyResult",
    "Recording",
    "ReplayParams",
    "make_recording",
    "prefix_floor_usd",
    "replay",
    "tail_cut_mask",
    "truncation",
]
