"""E, L, R, avg, c and the current context of a session (DESIGN §2 "Estimating E, L, R, avg").

Pure functions of a :class:`~dp_compact.conversation.Session` and :class:`~dp_compact.settings.Settings`.
With the seed agent's ``stats.json`` attached, its counters take the place of what the session
itself records (DESIGN §4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, eq

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message, Session, Usage
from dp_compact.measure.columns import message_columns, usage_columns
from dp_compact.settings import Settings

__all__ = [
    "CONTRADICTION_MIN_TOKENS",
    "CONTRADICTION_SHARE",
    "DEFAULT_AVG_TOKENS",
    "DEFAULT_CALLS_PER_TURN",
    "DEFAULT_E",
    "MAX_MEASURED_V_SHARE",
    "MIN_RATIO_GROWTH_TOKENS",
    "RATIO_BOUNDS",
    "V_SOURCES",
    "CallPlacement",
    "CurrentContext",
    "Estimates",
    "call_message_counts",
    "current_context",
    "estimate",
    "first_calls_after",
    "fixed_prefix",
    "measured_prefix",
    "measured_token_ratio",
    "place_calls",
    "prompt_growths",
]

#: DESIGN §2: avg when the session has no usage records (tokens per call).
DEFAULT_AVG_TOKENS = 4000.0
#: L when it cannot be measured (calls per user turn): the pooled LLM calls / user turns of the
#: real transcripts with usage records (calibration/README.md; DESIGN §2 had 5 before calibration).
DEFAULT_CALLS_PER_TURN = 23.0
#: Least growth of the counted tokens between the first and last placed call for a session's own
#: token ratio to be trusted (tokens); below it the calibrated family ratio is used.
MIN_RATIO_GROWTH_TOKENS = 2000
#: Bounds of a measured token ratio (provider tokens per counted token); outside them the
#: measurement says more about what the transcript leaves out than about the tokenizer.
RATIO_BOUNDS = (0.5, 4.0)
#: Where the fixed prefix V a plan or replay uses comes from (:func:`fixed_prefix`): ``DP_V`` /
#: ``--v`` given, the session's usage records, the statement of an earlier dp-compact compaction
#: or shrink in the file (measured on the conversation before it), or ``DP_V``'s default (the
#: median measured over real agents, ``Settings.v``).
V_SOURCES = ("setting", "measured", "recorded", "default")
#: A measured fixed prefix above this share of the window M is not taken as one: it would leave
#: less room for the conversation than the prefix itself. The measured prefixes of the shared
#: transcripts run from 6,500 to 36,700 tokens, under a fifth of their windows.
MAX_MEASURED_V_SHARE = 0.5

#: DESIGN §2: E when neither DP_E_FIXED nor DP_BASELINE_E is set (user turns).
DEFAULT_E = 2.0

#: A usage record whose prompt is below this share of the tokens counted in the messages it was
#: sent contradicts them: a prompt holds at least the messages it carries (plus the prefix V).
#: The message tokens are already in the provider's tokens (scaled by the session's measured or
#: its family's calibrated ratio, ``calibration/README.md``), whose spread between sessions stays
#: well inside a factor 2, so half is a contradiction, not tokenizer noise.
CONTRADICTION_SHARE = 0.5
#: Least tokens sent to a call for that check (tokens): below it the per-message framing and
#: the tokenizer difference dominate the comparison.
CONTRADICTION_MIN_TOKENS = 2000


@dataclass(frozen=True, slots=True)
class Estimates:
    """The session-dependent scalars of the cost model.

    Attributes
    ----------
    user_turns : int
        t, user turns so far.
    expected_turns : float
        E, expected remaining user turns.
    calls_per_turn : float
        L, LLM calls per user turn (≥ 1).
    remaining_calls : float
        R = E · L.
    avg_tokens : float
        avg, mean prompt tokens per call.
    compactions : int
        c, compactions already made.
    context_tokens : int
        The current context, tokens (:func:`current_context`): the last call's prompt plus what
        was appended after that call, else V + T.
    context_source : str
        ``"usage"``, ``"stats"`` or ``"estimate"`` (V + T).
    l_source, avg_source : str
        Where L and avg come from (``"setting"``, ``"measured"``, ``"stats"``, ``"default"``; avg
        also ``"recorded"``: stated by the summary of a compaction of ours, the file having no
        usage records of its own).
    context_note : str
        How the current context was obtained, when it is more than a figure read as is (the
        tokens added since the last call, a usage record not trusted); ``""`` otherwise.
    """

    user_turns: int
    expected_turns: float
    calls_per_turn: float
    remaining_calls: float
    avg_tokens: float
    compactions: int
    context_tokens: int
    context_source: str
    l_source: str
    avg_source: str
    context_note: str = ""


def _expected_turns(settings: Settings, user_turns: int) -> float:
    """E of DESIGN §2: DP_E_FIXED, else max(baseline − t, floor), else 2."""
    if settings.e_fixed > 0:
        return float(settings.e_fixed)
    if settings.baseline_e > 0:
        floor = settings.baseline_e // 2 if settings.baseline_e > 1 else 2
        return float(max(settings.baseline_e - user_turns, floor))
    return DEFAULT_E


@dataclass(frozen=True, slots=True)
class CurrentContext:
    """The current context of DESIGN §2: what the next call will carry, in tokens.

    Attributes
    ----------
    tokens : int
        The current context, tokens (V included).
    source : {"usage", "stats", "recorded", "estimate"}
        A usage record (plus what was appended since), the seed agent's counter, the context a
        file ``dp-compact shrink`` wrote states (plus what was appended since), or V + T.
    appended_tokens : int
        Tokens of the messages appended after the call the last usage record measured (its
        response and the tool results after it), on the scale of T; 0 when none is known.
    note : str
        One sentence for the plan's notes; ``""`` when a figure is taken as it is.
    """

    tokens: int
    source: str
    appended_tokens: int = 0
    note: str = ""


#: A message's role, and a message's or usage record's source line.
_ROLE, _LINE = attrgetter("role"), attrgetter("line")


def call_message_counts(messages: Sequence[Message], usage: Sequence[Usage]) -> npt.NDArray[np.int64]:
    """How many messages each call was sent: the index of the assistant message answering it (usage placement).

    Parameters
    ----------
    messages : sequence of Message
        A segment's messages, in order.
    usage : sequence of Usage
        The segment's usage records, in call order.

    Returns
    -------
    ndarray[int64], shape (len(usage),)
        ``n`` per call (the prompt held messages ``[0, n)`` besides the prefix V); ``-1`` for a
        call whose response cannot be placed (no assistant message at or before its line, or
        one already claimed by an earlier call).

    Notes
    -----
    A call's response is the last assistant message starting at or before the usage record's
    line: Claude Code and Anthropic lists put the usage on the response's first line, Codex
    writes its ``token_count`` event after the response's items.
    """
    return _placed_counts(messages, np.fromiter(map(_LINE, usage), np.int64, len(usage)))


def _placed_counts(messages: Sequence[Message], usage_lines: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`call_message_counts` of usage records at the source lines ``usage_lines``."""
    columns = message_columns(messages)
    if columns is None:  # the assistant messages and their lines, each a pass in C over the messages
        n = len(messages)
        indices = np.flatnonzero(np.fromiter(map(eq, map(_ROLE, messages), repeat("assistant")), dtype=bool, count=n)).astype(np.int64)
        at = np.fromiter(map(_LINE, messages), np.int64, n)[indices]
    else:
        indices = columns.assistant.nonzero()[0].astype(np.int64)
        at = columns.line[indices]
    order = at.argsort(kind="stable")
    assistant, lines = indices[order], at[order]
    where = np.searchsorted(lines, usage_lines, side="right") - 1
    counts = np.empty(len(usage_lines), dtype=np.int64)
    counts.fill(-1)
    placed = (where >= 0).nonzero()[0]
    landed = where[placed]
    if landed.size < 2 or np.count_nonzero(landed[1:] > landed[:-1]) == landed.size - 1:  # each call on a later response: each claims its own
        claims = placed
    else:
        _, first = np.unique(landed, return_index=True)  # each response claimed by the first call that lands on it
        claims = placed[first]
    counts[claims] = assistant[where[claims]]
    return counts


@dataclass(frozen=True, slots=True)
class CallPlacement:
    """The usage records of a session's calls placed on its messages, once (:func:`place_calls`).

    Every measurement from usage records (V, :func:`measured_prefix`; the token ratio,
    :func:`measured_token_ratio`; the current context, :func:`current_context`; the replay's
    recorded calls) reads this one placement.

    Attributes
    ----------
    usage : tuple[Usage, ...]
        The usage records of the calls made in the conversation (at or after the line of its
        first message), in call order.
    sent : ndarray[int64], shape (len(usage),)
        Messages each call was sent (:func:`call_message_counts`: the index of the assistant
        message answering it); ``-1`` for a call that cannot be placed, among them every record
        without a source line (``Usage.line == 0``). Read-only.
    """

    usage: tuple[Usage, ...]
    sent: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        self.sent.setflags(write=False)

    @property
    def placed(self) -> npt.NDArray[np.intp]:
        """Indices (into ``usage``) of the calls placed on a message, ascending."""
        return (self.sent >= 0).nonzero()[0]  # sent: shape (len(usage),)


def place_calls(session: Session) -> CallPlacement:
    """Place the usage records of ``session``'s calls on its messages (:class:`CallPlacement`).

    Parameters
    ----------
    session : Session
        The messages (with their source lines) and the usage records.

    Returns
    -------
    CallPlacement
        The records at or after the first message's line, each with the messages its call was
        sent (:func:`call_message_counts` of the records that have a source line; a record
        without one cannot be placed, ``Usage.line``).
    """
    if not session.messages:
        return CallPlacement((), np.zeros(0, dtype=np.int64))
    first_line = session.messages[0].line
    columns = usage_columns(session.usage)
    if columns is None:
        usage = tuple(u for u in session.usage if u.line >= first_line)
        sent = np.full(len(usage), -1, dtype=np.int64)
        lined = [i for i, u in enumerate(usage) if u.line > 0]
        if lined:
            sent[lined] = call_message_counts(session.messages, [usage[i] for i in lined])
        return CallPlacement(usage, sent)
    live = columns.line >= first_line
    usage = tuple(session.usage) if np.count_nonzero(live) == live.size else tuple(compress(session.usage, live.tolist()))
    lines = columns.line[live]
    sent = np.empty(len(usage), dtype=np.int64)
    sent.fill(-1)
    lined = (lines > 0).nonzero()[0]
    if lined.size:  # call_message_counts of the records with a line, from their lines as the column holds them
        sent[lined] = _placed_counts(session.messages, lines[lined])
    return CallPlacement(usage, sent)


def measured_prefix(
    session: Session, message_tokens: npt.NDArray[np.int64], placement: CallPlacement | None = None
) -> int | None:
    """The fixed prefix V (system prompt, tool definitions) the session's own usage records
    measure, tokens: the prompt of the first placed call with a prompt (:func:`place_calls`) less
    the tokens of the messages it carried.

    Parameters
    ----------
    session : Session
        The messages, with their source lines, and the usage records.
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message on the provider's scale (what the prompts are counted in).
    placement : CallPlacement, optional
        ``place_calls(session)`` when the caller has it; placed here otherwise.

    Returns
    -------
    int or None
        None when no usage record with a prompt is placed on a message. It may be zero or below
        when the messages as counted exceed what the provider counted: :func:`fixed_prefix` does
        not take such a measurement.
    """
    placement = place_calls(session) if placement is None else placement
    for index in map(int, placement.placed):  # usually the first placed call: no list of them all
        if placement.usage[index].prompt_tokens > 0:
            carried = int(np.asarray(message_tokens, dtype=np.int64)[: int(placement.sent[index])].sum())
            return int(placement.usage[index].prompt_tokens) - carried
    return None


def fixed_prefix(
    settings: Settings, measured: int | None, window_tokens: int, *, call: str = "the first recorded call",
    recorded: int | None = None,
) -> tuple[int, str, str]:
    """The fixed prefix V a plan or a replay uses, tokens; where it comes from (:data:`V_SOURCES`); a note.

    Parameters
    ----------
    settings : Settings
        ``v`` (``DP_V``), tokens, and whether the user gave it (``model_fields_set``: a flag,
        ``DP_V`` or the ``.env`` file).
    measured : int or None
        The prefix the session's usage records measure (:func:`measured_prefix`, or a replay's
        ``Recording.counted_v``), tokens; None when they measure none.
    window_tokens : int
        The window M, tokens.
    call : str
        Which call measured it, as the note names it (``plan`` measures on the conversation since
        the last compaction, ``replay`` on the whole recorded history).
    recorded : int or None
        The prefix an earlier dp-compact compaction or shrink states it measured on the
        conversation it rewrote (``Session.recorded_prefix_tokens``), tokens: taken when the
        file's own usage records measure none.

    Returns
    -------
    (int, str, str)
        ``settings.v`` when given (``"setting"``); else the measured prefix when it is positive
        and at most :data:`MAX_MEASURED_V_SHARE` of M (``"measured"``); else, when nothing is
        measured, the ``recorded`` one under the same bound (``"recorded"``); else ``settings.v``
        (``"default"``). The note says which, and why.
    """
    if "v" in settings.model_fields_set:
        told = "" if measured is None or measured == settings.v else f" (its usage records measure {measured:,})"
        return settings.v, "setting", f"V {settings.v:,} tokens: DP_V / --v as given{told}"
    if measured is None and recorded is not None and 0 < recorded <= MAX_MEASURED_V_SHARE * window_tokens:
        return recorded, "recorded", (f"V {recorded:,} tokens: as the statement of an earlier dp-compact compaction or"
                                      " shrink in the file gives it, measured from the usage records of the conversation"
                                      " it rewrote (this file has none to measure it from)")
    if measured is None:
        return settings.v, "default", (f"V {settings.v:,} tokens: the DP_V default; the session has no usage record that its"
                                       " own fixed prefix can be measured from (set DP_V or --v to give yours)")
    first = f"the prompt of {call} less the messages it carried"
    if measured <= 0:
        return settings.v, "default", (f"V {settings.v:,} tokens: the DP_V default; the fixed prefix measured from the"
                                       f" usage records ({first}) is {measured:,} tokens, not positive: the messages as"
                                       " counted here exceed what the provider counted")
    if measured > MAX_MEASURED_V_SHARE * window_tokens:
        return settings.v, "default", (f"V {settings.v:,} tokens: the DP_V default; the fixed prefix measured from the"
                                       f" usage records ({first}) is {measured:,} tokens, more than"
                                       f" {MAX_MEASURED_V_SHARE:.0%} of the {window_tokens:,}-token window")
    return measured, "measured", f"V {measured:,} tokens: this session's own fixed prefix, measured from its usage records ({first})"


def _answered_by(session: Session, placement: CallPlacement) -> int | None:
    """Index of the live message that answers the call of the last usage record, None when unplaced."""
    last = session.usage[-1]
    if last.line <= 0 or not session.messages or not placement.usage:
        return None
    index = int(placement.sent[-1])
    return index if index >= 0 and session.messages[index].line > 0 else None


def _sent_tokens(session: Session, settings: Settings, n: int, total_tokens: int, message_tokens: npt.NDArray[np.int64] | None) -> int:
    """Tokens of ``messages[:n]`` on the scale of ``total_tokens``.

    Without ``message_tokens`` the messages are counted here with the settings' tokenizer and
    their share of T is taken, which is exact for T counted the same way and whatever scale
    (provider token ratio) T was put on.
    """
    if message_tokens is not None:
        return int(np.asarray(message_tokens, dtype=np.int64)[:n].sum())
    from dp_compact.measure.tokens import count_message_tokens

    counted = count_message_tokens(session.messages, tokenizer=settings.tokenizer)
    whole = int(counted.sum())
    return round(total_tokens * int(counted[:n].sum()) / whole) if whole else 0


def _conventions_note(session: Session) -> str:
    """A sentence when the live usage records mix Anthropic- and OpenAI-style usage objects."""
    first_line = session.messages[0].line if session.messages else 0
    columns = usage_columns(session.usage)
    if columns is None:
        found = {u.convention for u in session.usage if u.line >= first_line and u.convention}
    elif len(columns.conventions) < 2:  # the live records' conventions are among those met: fewer than two
        return ""
    else:
        found = {name for c in set(columns.convention[columns.line >= first_line].tolist()) if (name := columns.conventions[c])}
    if len(found) < 2:
        return ""
    return ("the usage records mix Anthropic-style objects (input_tokens excludes the cache reads, which are added)"
            " and OpenAI-style ones (input_tokens already includes the cached tokens): each was read by its own keys")


def current_context(
    session: Session, settings: Settings, *, total_tokens: int, message_tokens: npt.NDArray[np.int64] | None = None,
    v_tokens: int | None = None, placement: CallPlacement | None = None,
) -> CurrentContext:
    """The current context: the size of the prompt the next call will send (DESIGN §2).

    A usage record measures the prompt of the call that produced it, before that call's
    response and the results of its tool calls were appended; the next call carries them too.
    So, for every format:

    1. the seed agent's ``current_context_tokens`` (``--stats``) when given;
    2. without usage records: V + T;
    3. when the last record predates the live conversation (its line is before the first
       live message: a compaction since): V + T;
    4. when it cannot be placed among the messages (no source line, or no assistant message
       of its own at or before its line, as :func:`place_calls` places calls): its prompt as reported;
    5. when its prompt is below ``CONTRADICTION_SHARE`` of the tokens counted in the messages
       that call was sent (at least ``CONTRADICTION_MIN_TOKENS``): the record contradicts the
       messages and V + T is used, with a note;
    6. else the record's prompt plus the tokens of the messages from the call's response on.

    Parameters
    ----------
    session : Session
        Live messages (with source lines) and usage records.
    settings : Settings
        The tokenizer (used only without ``message_tokens``), and V (``DP_V``, tokens) when
        ``v_tokens`` is not given.
    total_tokens : int
        T, tokens of the live messages on the scale the planner uses.
    message_tokens : ndarray[int64], shape (N,), optional
        Tokens per live message summing to T. Without it the messages are counted here
        (:func:`_sent_tokens`) and the split is taken as a share of T.
    v_tokens : int, optional
        V, tokens: the session's fixed prefix as :func:`dp_compact.prepare.prepare` chose it; default ``settings.v``.
    placement : CallPlacement, optional
        ``place_calls(session)`` when the caller has it; placed here otherwise.

    Returns
    -------
    CurrentContext
        Tokens, source, tokens appended since the last call and a note saying which figure was
        used (the record's line and convention, or why it was not trusted).
    """
    stats = session.stats
    if stats and stats.current_context_tokens is not None:
        return CurrentContext(stats.current_context_tokens, "stats")
    estimated = (settings.v if v_tokens is None else v_tokens) + total_tokens
    if not session.usage and session.recorded_context is not None:  # a shrunk file: its context when written
        tokens, count = session.recorded_context
        n = len(session.messages)
        if message_tokens is not None:
            appended = int(np.asarray(message_tokens)[min(count, n):].sum())
        else:
            appended = round(total_tokens * max(n - count, 0) / n) if n else 0
        note = (f"current context = the {tokens:,} tokens the shrunk file states it had ({count} messages)"
                + (f" + {appended:,} tokens of the {n - count} messages appended since" if n > count else ""))
        return CurrentContext(tokens + appended, "recorded", appended_tokens=appended, note=note)
    if not session.usage:
        return CurrentContext(estimated, "estimate")
    last = session.usage[-1]
    mixed = _conventions_note(session)
    first_line = session.messages[0].line if session.messages else 0
    if 0 < last.line < first_line:
        note = (f"the last usage record (line {last.line}) predates the live conversation (a compaction since):"
                f" the current context is V + T = {estimated:,} tokens")
        return CurrentContext(estimated, "estimate", note=note)
    n = _answered_by(session, place_calls(session) if placement is None else placement)
    if n is None:
        return CurrentContext(last.prompt_tokens, "usage", note=mixed)
    sent = _sent_tokens(session, settings, n, total_tokens, message_tokens)
    appended = max(total_tokens - sent, 0)
    if sent >= CONTRADICTION_MIN_TOKENS and last.prompt_tokens < CONTRADICTION_SHARE * sent:
        note = (f"the last usage record (line {last.line}) reports a prompt of {last.prompt_tokens:,} tokens, less than"
                f" {CONTRADICTION_SHARE:.0%} of the {sent:,} tokens counted in the {n} messages that call was sent:"
                f" it contradicts the messages and is not used; the current context is V + T = {estimated:,} tokens")
        return CurrentContext(estimated, "estimate", appended, "; ".join(filter(None, (note, mixed))))
    style = {"openai": f", OpenAI-style usage: input includes {last.cache_read_tokens:,} cached",
             "anthropic": ", Anthropic-style usage: input + cache reads + cache writes"}.get(last.convention, "")
    after = len(session.messages) - n
    appended_what = "the message appended after it (its response)" if after == 1 else \
        f"the {after} messages appended after it (its response and tool results)"
    note = f"current context = the last call's prompt ({last.prompt_tokens:,} tokens, line {last.line}{style}) + {appended:,} tokens of {appended_what}"
    return CurrentContext(last.prompt_tokens + appended, "usage", appended, "; ".join(filter(None, (note, mixed))))


def estimate(
    session: Session, settings: Settings, *, total_tokens: int, message_tokens: npt.NDArray[np.int64] | None = None,
    v_tokens: int | None = None, placement: CallPlacement | None = None,
) -> Estimates:
    """Estimate E, L, R, avg, c and the current context (DESIGN §2).

    Parameters
    ----------
    session : Session
    settings : Settings
    total_tokens : int
        T, tokens of the live messages.
    message_tokens : ndarray[int64], shape (N,), optional
        Tokens per live message (summing to T), for the current context
        (:func:`current_context`); counted there when not given.
    v_tokens : int, optional
        V, tokens, for the current context without usage (V + T); default ``settings.v``.
    placement : CallPlacement, optional
        The usage records placed on the messages (:func:`place_calls`); placed here when not given.

    Returns
    -------
    Estimates
    """
    stats = session.stats
    user_turns = stats.current_turn_count if stats and stats.current_turn_count is not None else session.user_turns
    calls = stats.agent_request_count if stats and stats.agent_request_count is not None else session.llm_calls
    if settings.l > 0:
        calls_per_turn, l_source = float(settings.l), "setting"
    elif calls > 0 and user_turns > 0:
        calls_per_turn, l_source = calls / user_turns, "stats" if stats else "measured"
    else:
        calls_per_turn, l_source = DEFAULT_CALLS_PER_TURN, "default"
    calls_per_turn = max(calls_per_turn, 1.0)
    expected_turns = _expected_turns(settings, user_turns)

    if stats and stats.total_input_tokens and stats.agent_request_count:
        avg, avg_source = stats.total_input_tokens / stats.agent_request_count, "stats"
    elif session.usage:
        columns = usage_columns(session.usage)
        prompted = sum(u.prompt_tokens for u in session.usage) if columns is None else int(columns.prompt_tokens.sum())
        avg = prompted / len(session.usage)
        avg_source = "measured"
    elif session.recorded_avg_tokens:  # a compacted file: the usage of the conversation it compacted
        avg, avg_source = session.recorded_avg_tokens, "recorded"
    else:
        avg, avg_source = DEFAULT_AVG_TOKENS, "default"

    context = current_context(session, settings, total_tokens=total_tokens, message_tokens=message_tokens, v_tokens=v_tokens,
                              placement=placement)
    compactions = stats.compact_request_count if stats and stats.compact_request_count is not None else session.compactions
    return Estimates(
        user_turns=int(user_turns),
        expected_turns=expected_turns,
        calls_per_turn=calls_per_turn,
        remaining_calls=expected_turns * calls_per_turn,
        avg_tokens=float(avg),
        compactions=int(compactions),
        context_tokens=int(context.tokens),
        context_source=context.source,
        l_source=l_source,
        avg_source=avg_source,
        context_note=context.note,
    )


def first_calls_after(call_lines: npt.NDArray[np.int64], compaction_lines: Sequence[int]) -> npt.NDArray[np.bool_]:
    """True for each call that is the first after a recorded compaction.

    Parameters
    ----------
    call_lines : ndarray[int64], shape (C,)
        Source line of each call (its usage record or its response), ascending.
    compaction_lines : sequence of int
        Source lines of the compactions the file records (``RecordedCompaction.line``).

    Returns
    -------
    ndarray[bool], shape (C,)
        ``[j]`` True when a compaction lies between call ``j − 1`` and call ``j`` (never for call 0:
        nothing before it was compacted for it).

    >>> first_calls_after(np.array([3, 6, 13, 16]), [10, 20])
    array([False, False,  True, False])
    """
    marked = np.zeros(call_lines.shape, dtype=bool)
    if not len(compaction_lines):  # none recorded (a live conversation): no call follows one
        return marked
    after = np.searchsorted(call_lines, np.asarray(compaction_lines, dtype=np.int64), side="left")
    marked[after[(after > 0) & (after < marked.size)]] = True
    return marked


def prompt_growths(
    sent: npt.NDArray[np.int64], prompts: npt.NDArray[np.int64], message_tokens: npt.NDArray[np.int64],
    image_tokens: npt.NDArray[np.int64] | None = None, compacted: npt.NDArray[np.bool_] | None = None,
) -> tuple[int, int]:
    """Growth of the counted messages and of the reported prompt from call to call, summed over
    the steps that cross no compaction (:func:`measured_token_ratio`), images taken off both.

    Parameters
    ----------
    sent : ndarray[int64], shape (C,)
        Messages each call was sent (:attr:`CallPlacement.sent`, placed calls only), in call order.
    prompts : ndarray[int64], shape (C,)
        Those calls' reported prompts, tokens.
    message_tokens, image_tokens : ndarray[int64], shape (N,)
        Counted tokens per message, and the images' part of them (none when not given).
    compacted : ndarray[bool], shape (C,), optional
        True for a call that is the first after a compaction (:func:`first_calls_after`): the
        step into it is left out; none by default.

    Returns
    -------
    (int, int)
        ``(counted growth, prompt growth)`` in tokens; ``(0, 0)`` with fewer than two calls.

    >>> prompt_growths(np.array([1, 3, 4, 5]), np.array([100, 130, 40, 50]), np.array([5, 10, 10, 5, 5]),
    ...                compacted=np.array([False, False, True, False]))
    (25, 40)
    """
    if sent.size < 2:
        return 0, 0
    tokens, reported = np.asarray(message_tokens), np.asarray(prompts)
    first, last = int(sent[0]), int(sent[-1])
    if ((compacted is None or not np.count_nonzero(np.asarray(compacted, dtype=bool)[1:])) and tokens.ndim == 1
            and 0 <= min(first, last) and max(first, last) <= tokens.size and tokens.dtype == reported.dtype == np.int64):
        # every step kept: the growths from call to call add up to the last call's less the first's (int64 sums, exact)
        images = 0 if image_tokens is None else _grown(np.asarray(image_tokens, dtype=np.int64), first, last)
        return _grown(tokens, first, last) - images, int(reported[-1]) - int(reported[0]) - images
    kept = np.ones(sent.size - 1, dtype=bool) if compacted is None else ~np.asarray(compacted, dtype=bool)[1:]
    counted = np.concatenate(([0], np.cumsum(message_tokens)))[sent]
    images = 0
    if image_tokens is not None:
        images = int(np.diff(np.concatenate(([0], np.cumsum(np.asarray(image_tokens, dtype=np.int64))))[sent])[kept].sum())
    return int(np.diff(counted)[kept].sum()) - images, int(np.diff(prompts)[kept].sum()) - images


def _grown(tokens: npt.NDArray[np.int64], first: int, last: int) -> int:
    """Tokens of the messages ``[0, last)`` less those of ``[0, first)`` (``tokens``: int64 per message):
    one sum of the messages between them (int64 sums, exact)."""
    return int(tokens[first:last].sum()) if first <= last else -int(tokens[last:first].sum())


def measured_token_ratio(
    session: Session, message_tokens: npt.NDArray[np.int64], image_tokens: npt.NDArray[np.int64] | None = None,
    placement: CallPlacement | None = None,
) -> float | None:
    """Provider tokens per counted token, from the session's own usage records.

    Between two placed calls the reported prompt grows by the messages added between them (the
    prefix V cancels out): ratio = Δ reported prompt / Δ counted tokens, summed over the steps
    from call to call that cross no compaction the session records (``compaction_records``;
    a whole recorded history holds them, the live conversation starts after the last): across
    one, the tool's prompt was replaced by a summary while the history keeps every message.
    A tool's own trims of its prompt (Codex drops earlier reasoning) stay in: they are how its
    prompt grows. Images are priced in the provider's own tokens already: their tokens are
    taken off both growths, so that the ratio is that of the text.

    Parameters
    ----------
    session : Session
        Messages with their source lines (the live conversation, or a whole recorded history),
        usage records and recorded compactions.
    message_tokens : ndarray[int64], shape (N,)
        Counted tokens per message of ``session.messages``.
    image_tokens : ndarray[int64], shape (N,), optional
        The part of ``message_tokens`` that is images (:func:`~dp_compact.measure.tokens.image_token_counts`);
        none when not given.
    placement : CallPlacement, optional
        ``place_calls(session)`` when the caller has it; placed here otherwise.

    Returns
    -------
    float or None
        None when the counted messages grow by less than ``MIN_RATIO_GROWTH_TOKENS`` of text
        over those steps, or when the ratio falls outside ``RATIO_BOUNDS``.
    """
    if not session.messages or len(session.usage) < 2:
        return None
    placement = place_calls(session) if placement is None else placement
    usage, counts, placed = placement.usage, placement.sent, placement.placed
    if placed.size < 2:
        return None
    columns = usage_columns(usage)
    if columns is None:
        prompts = np.fromiter((usage[int(j)].prompt_tokens for j in placed), np.int64, placed.size)
        lines = np.fromiter((usage[int(j)].line for j in placed), np.int64, placed.size)
    else:
        prompts, lines = columns.prompt_tokens[placed], columns.line[placed]
    compacted = first_calls_after(lines, [r.line for r in session.compaction_records])
    grown, prompt_growth = prompt_growths(counts[placed], prompts, message_tokens, image_tokens, compacted)
    if grown < MIN_RATIO_GROWTH_TOKENS or prompt_growth <= 0:
        return None
    ratio = prompt_growth / grown
    return ratio if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1] else None
