"""Per-call overhead of the adapters against the conversation's length.

A real transcript (``--session``, default Claude Code ``cc_task43_develop``) is turned into the
messages a framework holds: LangChain ``HumanMessage`` / ``AIMessage`` / ``ToolMessage`` and
pydantic-ai ``ModelRequest`` / ``ModelResponse``, the assistant messages as a local fake model
answers them (the recorded text and tool calls, the recorded tool outputs, the usage a provider
reports: the prompt's tokens, the previous prompt read from the cache), its turns repeated with
fresh ids when a size needs more messages than it has. Each timed call is the adapter's hook as
the framework calls it before a model call (``DpCompactMiddleware.before_model``,
``DpCompactProcessor.__call__``), with default settings, an archive in a temporary folder, the
fake clock 30 s later than the call before: the conversation at a call point of about N messages
(the framework's own messages: a pydantic-ai request holds every tool result of a round) was
given at the call before, and the call adds one model round. The framework's own work is not
timed, only the adapter's.

Three settings: ``default`` (the model's 200k window; every text, tool argument and tool output
cut to 8,000 characters): past a few dozen messages every such call compacts, as the planner says
it should at that size; and ``keeps``, the same conversations cut to 1,200 characters, a 1M
window and a cache read priced at 0.0003 $/MTok (``p_cache``), under which compacting does not
pay at any size measured: every call plans with the same look-ahead (its grid and horizon do not
depend on the prices) and keeps; and ``tiered``, the conversations and cache price of ``keeps`` with a model whose whole request pays more
above 200,000 prompt tokens within its 1,048,576-token window (``TIERED_MODEL``, Gemini 2.5 Pro), so
that the look-ahead prices the cliff. The overhead of calls that do not compact is read from ``keeps``
and ``tiered``. All plan with
clearing old tool results priced (``clear_tool_results``, on by default: the look-ahead weighs
clearing at every depth, DESIGN §9), as the adapters plan with an archive.

``--frameworks langchain-full`` times the middleware's work without kept state (every call
converts, reads, counts and plans the whole list, as before the kept state): the comparison.

Columns: framework; settings; messages N at the timed call; calls that did not compact: their count,
median, 90th percentile and least, ms, the median and 90th percentile of the processor time they
took (``cpu``: this thread's, which other processes on a loaded machine do not lengthen), and how
many of them ran a garbage collection of generation 1 or 2 (``gc``: the young generation alone
costs tens of microseconds); calls that compacted (the plan, the extractive summary, the archive
write, the rebuilt list), the same; the first call of an adapter that sees the
conversation whole (no state kept yet: everything read, counted and planned), median, ms.

    python bench/bench_adapters.py [--repeat 30] [--sizes 10 30 100 300 1000] [--session claude_code/cc_task43_develop.jsonl]

``rows()`` returns the table's rows as dicts and ``live_rows()`` the rows ``bench_live.py`` folds
into its combined table.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import SHARED_SESSIONS, machine_line  # noqa: E402

from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.sessions import read_session  # noqa: E402

DEFAULT_SESSION = "claude_code/cc_task43_develop.jsonl"
DEFAULT_SIZES = (10, 30, 100, 300, 1_000)
#: Tokens the provider counts beside the messages (system prompt, tool schemas).
PREFIX_TOKENS = 3_000
#: Characters a recorded text, tool argument or output is cut to under ``default`` (the transcript's largest run to 100k).
MAX_OUTPUT_CHARS = 8_000
#: Seconds between two calls of the fake clock (a tool loop's pace).
CALL_SECONDS = 30.0
#: Per-call overhead the adapters must stay under on calls that do not compact, ms.
TARGET_MS = 5.0
MODEL = "claude-sonnet-4"
#: The ``tiered`` settings' model: its whole request pays more above 200,000 prompt tokens, within its 1,048,576-token window.
TIERED_MODEL = "gemini-2.5-pro"


# --- the recorded agent -------------------------------------------------------------------------

def rounds_of(path: Path) -> list[tuple[str | None, str, list[tuple[str, str, dict[str, Any], str]]]]:
    """The transcript as model rounds: (user text that opened it or None, assistant text, [(call id, tool name, arguments, output)])."""
    session = read_session(path, lenient=True)
    outputs = {r.call_id: r.text for m in session.messages for r in m.tool_results}
    rounds: list[tuple[str | None, str, list[tuple[str, str, dict[str, Any], str]]]] = []
    user: str | None = None
    for message in session.messages:
        if message.role == "user" and message.text:
            user = message.text if user is None else user + "\n\n" + message.text
        elif message.role == "assistant":
            calls = []
            for call in message.tool_calls:
                try:
                    args = json.loads(call.arguments) if call.arguments else {}
                except ValueError:
                    args = {"input": call.arguments}
                name = "".join(c if c.isalnum() or c in "_-" else "_" for c in call.name)[:64] or "tool"
                calls.append((call.id, name, args if isinstance(args, dict) else {"input": args},
                              outputs.get(call.id, "(no recorded output)")[:MAX_OUTPUT_CHARS]))
            rounds.append((user, message.text, calls))
            user = None
    return [r for r in rounds if r[0] is not None or r[2] or r[1]]


def _cycled(rounds: Sequence[Any], max_chars: int) -> Any:
    """The rounds over and over, each repetition with call ids of its own; every text, argument and
    output cut to ``max_chars`` characters."""
    def cut(value: Any) -> Any:
        return value[:max_chars] if isinstance(value, str) else value

    for lap in itertools.count():
        for user, text, calls in rounds:
            yield (cut(user), cut(text),
                   [(f"{cid}-{lap}", name, {k: cut(v) for k, v in args.items()}, cut(out)) for cid, name, args, out in calls])


class _Prompt:
    """The prompt a provider would report: PREFIX_TOKENS plus the messages so far (chars / 4), and the previous one cached."""

    def __init__(self) -> None:
        self.chars, self.previous = 0, 0

    def add(self, text: str) -> None:
        self.chars += len(text)

    def call(self) -> tuple[int, int]:
        prompt = PREFIX_TOKENS + self.chars // 4
        cached, self.previous = min(self.previous, prompt), prompt
        return prompt, cached


def langchain_stream(rounds: Sequence[Any], n_messages: int, max_chars: int, model: str = MODEL) -> tuple[list[Any], list[int]]:
    """LangChain messages of at least ``n_messages`` (plus two rounds), and the call points (index of each AIMessage)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    messages: list[Any] = []
    points: list[int] = []
    prompt = _Prompt()
    for number, (user, text, calls) in enumerate(_cycled(rounds, max_chars)):
        if len(points) > 2 and points[-3] > n_messages:
            break
        if user is not None:
            messages.append(HumanMessage(user, id=f"h{number}"))
            prompt.add(user)
        tokens, cached = prompt.call()
        points.append(len(messages))
        messages.append(AIMessage(text, id=f"a{number}", tool_calls=[{"name": n, "args": a, "id": c} for c, n, a, _ in calls],
                                  usage_metadata={"input_tokens": tokens, "output_tokens": 200, "total_tokens": tokens + 200,
                                                  "input_token_details": {"cache_read": cached}}))
        prompt.add(text + json.dumps([a for _, _, a, _ in calls]))
        for cid, name, _, out in calls:
            messages.append(ToolMessage(out, tool_call_id=cid, name=name, id=f"t{cid}"))
            prompt.add(out)
    return messages, points


def pydantic_stream(rounds: Sequence[Any], n_messages: int, max_chars: int, model: str = MODEL) -> tuple[list[Any], list[int]]:
    """pydantic-ai messages of at least ``n_messages`` (plus two rounds), and the call points (index of each ModelResponse)."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.usage import RequestUsage

    messages: list[Any] = []
    points: list[int] = []
    prompt = _Prompt()
    pending: list[Any] = [SystemPromptPart("You are a coding agent.")]
    for user, text, calls in _cycled(rounds, max_chars):
        if len(points) > 2 and points[-3] > n_messages:
            break
        if user is not None:
            pending.append(UserPromptPart(user))
            prompt.add(user)
        if pending:
            messages.append(ModelRequest(parts=pending))
        tokens, cached = prompt.call()
        points.append(len(messages))
        parts: list[Any] = [TextPart(text)] if text else []
        parts += [ToolCallPart(name, args, cid) for cid, name, args, _ in calls]
        messages.append(ModelResponse(parts=parts or [TextPart("(done)")], model_name=model,
                                      usage=RequestUsage(input_tokens=tokens, cache_read_tokens=cached, output_tokens=200)))
        prompt.add(text + json.dumps([a for _, _, a, _ in calls]))
        pending = [ToolReturnPart(name, out, cid) for cid, name, _, out in calls]
        for _, _, _, out in calls:
            prompt.add(out)
    return messages, points


# --- timing -------------------------------------------------------------------------------------

class _Clock:
    """A fake clock: CALL_SECONDS later at every reading."""

    def __init__(self) -> None:
        self.now = 1.8e9

    def __call__(self) -> float:
        self.now += CALL_SECONDS
        return self.now


def _langchain_hook(archive: Path, settings: dict[str, Any]) -> tuple[Callable[[list[Any]], bool], Any]:
    from dp_compact.adapters.langchain import DpCompactMiddleware

    settings = dict(settings)
    middleware = DpCompactMiddleware(settings.pop("model", MODEL), archive=ArchiveStore(archive), clock=_Clock(), **settings)

    def call(messages: list[Any]) -> bool:
        return middleware.before_model({"messages": messages}, None) is not None  # type: ignore[arg-type]
    return call, middleware


def _pydantic_hook(archive: Path, settings: dict[str, Any]) -> tuple[Callable[[list[Any]], bool], Any]:
    from dp_compact.adapters.pydantic_ai import DpCompactProcessor

    settings = dict(settings)
    processor = DpCompactProcessor(settings.pop("model", MODEL), archive=ArchiveStore(archive), clock=_Clock(), **settings)

    def call(messages: list[Any]) -> bool:
        return processor(messages) is not messages
    return call, processor


#: Settings profile -> (tool output characters, adapter settings); module docstring.
PROFILES: dict[str, tuple[int, dict[str, Any]]] = {
    "default": (MAX_OUTPUT_CHARS, {}),
    "keeps": (1_200, {"max_context_tokens": 1_000_000, "p_cache": 0.0003}),
    "tiered": (1_200, {"model": TIERED_MODEL, "p_cache": 0.0003}),
}

def _langchain_full_hook(archive: Path, settings: dict[str, Any]) -> tuple[Callable[[list[Any]], bool], Any]:
    """The middleware's work without kept state, as every call did before the adapters kept state: convert, read,
    count and plan the whole list (``live_session`` and ``LiveCompactor.compact``); for comparison."""
    from dp_compact.adapters.langchain import DpCompactMiddleware, _usages, to_openai
    from dp_compact.adapters.live import live_session

    settings = dict(settings)
    middleware = DpCompactMiddleware(settings.pop("model", MODEL), archive=ArchiveStore(archive), clock=_Clock(), **settings)

    def call(messages: list[Any]) -> bool:
        session = live_session([to_openai(m) for m in messages], _usages(messages), session_id="langchain", facts=middleware.facts)
        return middleware.compact(session) is not None
    return call, middleware


FRAMEWORKS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "langchain": (langchain_stream, _langchain_hook),
    "pydantic-ai": (pydantic_stream, _pydantic_hook),
    "langchain-full": (langchain_stream, _langchain_full_hook),
}
#: What ``rows()`` measures by default (``langchain-full`` is the before-and-after comparison).
DEFAULT_FRAMEWORKS = ("langchain", "pydantic-ai")


def _p90(values: list[float]) -> float:
    return sorted(values)[max(int(round(0.9 * len(values))) - 1, 0)] if values else float("nan")


def measure(framework: str, rounds: Sequence[Any], size: int, repeat: int, profile: str = "default") -> dict[str, Any]:
    """Time ``repeat`` appended calls at about ``size`` messages (module docstring), and ``repeat // 5 + 1`` first calls."""
    stream_of, hook_of = FRAMEWORKS[framework]
    max_chars, settings = PROFILES[profile]
    messages, points = stream_of(rounds, size, max_chars, settings.get("model", MODEL))
    at = next((i for i, p in enumerate(points) if p >= size), len(points) - 2)
    targets = points[at: at + 3]  # three neighbouring call points, the first at N messages or just above
    keep: list[float] = []
    keep_cpu: list[float] = []  # the same calls' processor time (this thread's): what other processes on the machine do not add
    compact: list[float] = []
    first: list[float] = []
    collected: list[int] = []  # generations of the garbage collections run during the timed call

    def collecting(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as root:
        for attempt in range(repeat // 5 + 1):
            call, _ = hook_of(Path(root) / f"first-{attempt}", settings)
            start = time.perf_counter_ns()
            call(messages[:targets[0]])
            first.append((time.perf_counter_ns() - start) / 1e6)
        call, _ = hook_of(Path(root) / "calls", settings)
        keep_gc = 0  # timed calls that kept during which a collection of generation 1 or 2 ran
        for index in range(repeat):
            target = targets[index % len(targets)]
            before = points[points.index(target) - 1] if points.index(target) > 0 else 0
            call(messages[:before])  # the call before, untimed (a rebuild when the list is shorter than the last one)
            collected.clear()
            gc.callbacks.append(collecting)
            try:
                start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
                compacted = call(messages[:target])
                elapsed, cpu = (time.perf_counter_ns() - start) / 1e6, (time.thread_time_ns() - start_cpu) / 1e6
            finally:
                gc.callbacks.remove(collecting)
            (compact if compacted else keep).append(elapsed)
            if not compacted:
                keep_cpu.append(cpu)
            keep_gc += bool(collected and max(collected) >= 1 and not compacted)
    return {
        "framework": framework, "settings": profile, "messages": targets[0], "keep_calls": len(keep), "keep_gc_calls": keep_gc,
        "keep_median_ms": statistics.median(keep) if keep else float("nan"), "keep_p90_ms": _p90(keep),
        "keep_min_ms": min(keep) if keep else float("nan"),
        "keep_cpu_median_ms": statistics.median(keep_cpu) if keep_cpu else float("nan"), "keep_cpu_p90_ms": _p90(keep_cpu),
        "compact_calls": len(compact), "compact_median_ms": statistics.median(compact) if compact else float("nan"),
        "compact_p90_ms": _p90(compact), "first_median_ms": statistics.median(first),
    }


def rows(sizes: Sequence[int] = DEFAULT_SIZES, repeat: int = 30, session: str = DEFAULT_SESSION,
         frameworks: Sequence[str] = DEFAULT_FRAMEWORKS, profiles: Sequence[str] = tuple(PROFILES)) -> list[dict[str, Any]]:
    """The table's rows (module docstring), one per framework and size.

    Raises
    ------
    FileNotFoundError
        If the transcript is absent (``../shared/sessions``).
    """
    path = SHARED_SESSIONS / session
    if not path.exists():
        raise FileNotFoundError(f"{path} is absent: the benchmark replays the shared real transcripts")
    rounds = rounds_of(path)
    return [measure(framework, rounds, size, repeat, profile) for framework in frameworks for profile in profiles for size in sizes]


def live_rows(repeat: int = 20) -> list[tuple[str, str, str, str]]:
    """``bench_live.py``'s rows: ``(item, measured, target, ok)`` per framework and size."""
    out = []
    for row in rows(repeat=repeat):
        measured = (f"{row['keep_median_ms']:.2f} ms median, {row['keep_p90_ms']:.2f} p90 ({row['keep_calls']} calls)"
                    if row["keep_calls"] else "no call kept")
        if row["compact_calls"]:
            measured += f"; compacting {row['compact_median_ms']:.1f} ms ({row['compact_calls']})"
        ok = "yes" if row["keep_calls"] and row["keep_p90_ms"] <= TARGET_MS else "no" if row["keep_calls"] else ""
        out.append((f"{row['framework']} ({row['settings']}) at {row['messages']:,} messages", measured, f"<= {TARGET_MS:g} ms, flat", ok))
    return out


def _cell(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--session", default=DEFAULT_SESSION)
    parser.add_argument("--frameworks", nargs="+", default=list(DEFAULT_FRAMEWORKS), choices=list(FRAMEWORKS))
    parser.add_argument("--settings", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    args = parser.parse_args()
    print(machine_line())
    print(f"# {args.session}; {args.repeat} timed calls per size; fake clock {CALL_SECONDS:g} s per call; times in ms")
    print(f"{'framework':<14} {'settings':<8} {'messages':>8} {'kept':>5} {'median':>8} {'p90':>8} {'min':>8} {'cpu':>8} {'cpu p90':>8} {'gc':>4}"
          f" {'compacted':>9} {'median':>8} {'p90':>8} {'first':>8}")
    for row in rows(args.sizes, args.repeat, args.session, args.frameworks, args.settings):
        print(f"{row['framework']:<14} {row['settings']:<8} {row['messages']:>8,} {row['keep_calls']:>5} {_cell(row['keep_median_ms']):>8}"
              f" {_cell(row['keep_p90_ms']):>8} {_cell(row['keep_min_ms']):>8} {_cell(row['keep_cpu_median_ms']):>8}"
              f" {_cell(row['keep_cpu_p90_ms']):>8} {row['keep_gc_calls']:>4} {row['compact_calls']:>9}"
              f" {_cell(row['compact_median_ms']):>8} {_cell(row['compact_p90_ms']):>8} {_cell(row['first_median_ms']):>8}")


if __name__ == "__main__":
    main()
