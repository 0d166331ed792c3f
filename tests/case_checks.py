"""The checks of ../shared/cases/SCHEMA.md ("Checks" table), one function each.

Each check takes the :class:`~tests.case_harness.Run` and the check's dict and returns None
when it passes, else a reason. :func:`evaluate` runs a case's ``expect`` list in order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import case_harness as h

Reason = str | None


class _Context:
    """Lazily read output, output_from and the derived tail of one run."""

    def __init__(self, run: h.Run) -> None:
        self.run = run
        self.fmt = run.case["format"]
        name = h.output_name(run.case)
        self.output_path = run.run_dir / name if name else None
        self.source_path = run.run_dir / h.output_from_name(run)

    def output(self) -> list[Any]:
        """Parsed output lines (raises when absent or unparsable)."""
        if self.output_path is None or not self.output_path.exists():
            raise AssertionError("the output file is missing")
        return h.read_lines(self.output_path)

    def conversations(self) -> tuple[list[dict], list[dict], int]:
        """(output conversation, output_from conversation, kept)."""
        out = h.conversation(self.output())
        src = h.conversation(h.read_lines(self.source_path))
        return out, src, h.tail_length(out, src)


def _items_match(items: list[Any], text: str) -> Reason:
    """Every item (a string or a list of alternatives) occurs in ``text`` (case-insensitive)."""
    lowered = text.lower()
    for item in items:
        options = item if isinstance(item, list) else [item]
        if not any(str(o).lower() in lowered for o in options):
            return f"none of {options!r} found"
    return None


def _plan(run: h.Run) -> dict[str, Any]:
    plan = h.plan_json(run.stdout)
    if plan is None:
        raise AssertionError("no plan JSON on stdout")
    return plan


def check_exit_code(ctx: _Context, check: dict) -> Reason:
    return None if ctx.run.returncode == check["value"] else f"exit {ctx.run.returncode} != {check['value']}"


def check_no_traceback(ctx: _Context, check: dict) -> Reason:
    marker = "Traceback (most recent call last)"
    if marker in ctx.run.stdout or marker in ctx.run.stderr:
        return "traceback printed"
    return "killed by a signal" if ctx.run.returncode < 0 else None


def check_decision(ctx: _Context, check: dict) -> Reason:
    run, value = ctx.run, check["value"]
    if value == "error":
        return None if run.returncode != 0 and run.stderr.strip() else "expected a non-zero exit with stderr"
    if run.returncode != 0:
        return f"exit {run.returncode}"
    sub = h.last_subcommand(run.case["command"])
    if sub == "plan":
        got = h.plan_field(_plan(run), "decision")
        got = "keep" if got in h._DECISION_KEEP else got
        return None if got == value else f"plan decision {got!r} != {value!r}"
    exists = ctx.output_path is not None and ctx.output_path.exists()
    changed = exists and h.conversation(ctx.output()) != h.conversation(h.read_lines(ctx.source_path))
    if value == "compact":
        return None if changed else "output absent or holds the same conversation"
    return None if not changed else "the output differs from output_from"


def check_rule(ctx: _Context, check: dict) -> Reason:
    rule = h.plan_field(_plan(ctx.run), "rule")
    return None if isinstance(rule, str) and check["value"] in rule else f"rule {rule!r}"


def check_error_mentions(ctx: _Context, check: dict) -> Reason:
    return _items_match(check["value"], ctx.run.stderr + ctx.run.stdout)


def check_input_unchanged(ctx: _Context, check: dict) -> Reason:
    changed = [n for n, digest in ctx.run.hashes.items() if h.sha256(ctx.run.run_dir / n) != digest]
    return f"changed: {changed}" if changed else None


def check_no_output_written(ctx: _Context, check: dict) -> Reason:
    name = ctx.output_path.name if ctx.output_path else None
    if name is None:
        return "no output named"
    if ctx.output_path.exists():
        return "the output exists"
    leftovers = [p.name for p in ctx.run.run_dir.iterdir() if p.name not in ctx.run.files_before and name in p.name]
    return f"temporary files left: {leftovers}" if leftovers else None


def check_output_absent_or_identical(ctx: _Context, check: dict) -> Reason:
    if ctx.output_path is None or not ctx.output_path.exists():
        return None
    return None if ctx.output_path.read_bytes() == ctx.source_path.read_bytes() else "output exists and differs"


def check_files_differ(ctx: _Context, check: dict) -> Reason:
    for a, b in check["value"]:
        pa, pb = ctx.run.run_dir / a, ctx.run.run_dir / b
        if not (pa.exists() and pb.exists()) or pa.read_bytes() == pb.read_bytes():
            return f"{a} and {b} do not both exist with different bytes"
    return None


def check_output_parses(ctx: _Context, check: dict) -> Reason:
    bad = [m for m in ctx.output() if not h.accepts(m, ctx.fmt)]
    return f"{len(bad)} line(s) the reference reader rejects" if bad else None


def check_system_prompt_preserved(ctx: _Context, check: dict) -> Reason:
    out = ctx.output()
    systems = [m for m in out if m.get("role") == "system"]
    if systems != [m for m in h.read_lines(ctx.source_path) if m.get("role") == "system"]:
        return "system messages differ"
    first_other = next((i for i, m in enumerate(out) if m.get("role") != "system"), len(out))
    return "a system message after the conversation" if any(m.get("role") == "system" for m in out[first_other:]) else None


def check_no_orphan_tool_results(ctx: _Context, check: dict) -> Reason:
    conv, fmt = h.conversation(ctx.output()), ctx.fmt
    for i, message in enumerate(conv):
        for call_id in h.results_of(message, fmt):
            j = i - 1
            while fmt != "anthropic" and j >= 0 and conv[j].get("role") == "tool":
                j -= 1
            if j < 0 or call_id not in h.calls_of(conv[j], fmt):
                return f"message {i}: result {call_id} has no call right before it"
    return None


def check_every_tool_call_answered(ctx: _Context, check: dict) -> Reason:
    conv, fmt = h.conversation(ctx.output()), ctx.fmt
    source_last = h.conversation(h.read_lines(ctx.source_path))[-1:]
    for i, message in enumerate(conv):
        calls = h.calls_of(message, fmt)
        if not calls:
            continue
        answered: list[str] = []
        if fmt == "anthropic":
            nxt = conv[i + 1] if i + 1 < len(conv) else None
            answered = h.results_of(nxt, fmt) if nxt and nxt.get("role") == "user" else []
        else:
            j = i + 1
            while j < len(conv) and conv[j].get("role") == "tool":
                answered += h.results_of(conv[j], fmt)
                j += 1
        missing = [c for c in calls if c not in answered]
        if missing and not (check.get("allow_pending_last") and i == len(conv) - 1 and [message] == source_last):
            return f"message {i}: calls {missing} unanswered"
    return None


def check_tool_ids_unique(ctx: _Context, check: dict) -> Reason:
    conv = h.conversation(ctx.output())
    issued = [c for m in conv for c in h.calls_of(m, ctx.fmt)]
    answered = [c for m in conv for c in h.results_of(m, ctx.fmt)]
    dupes = {c for c in issued if issued.count(c) > 1} | {c for c in answered if answered.count(c) > 1}
    return f"duplicated ids {sorted(dupes)}" if dupes else None


def check_roles_alternate(ctx: _Context, check: dict) -> Reason:
    sides: list[str] = []
    previous = None
    for message in h.conversation(ctx.output()):
        role = message.get("role")
        if not (role == "tool" and previous == "tool"):  # a run of tool messages is one user-side message
            sides.append("user" if role in ("user", "tool") else str(role))
        previous = role
    if not sides or sides[0] != "user":
        return "does not start with user"
    bad = [i for i in range(1, len(sides)) if sides[i] == sides[i - 1]]
    return f"two {sides[bad[0]]} messages in a row at {bad[0]}" if bad else None


def check_tail_starts_with(ctx: _Context, check: dict) -> Reason:
    out, _, kept = ctx.conversations()
    if kept == 0:
        return "empty tail"
    first = out[len(out) - kept]
    if check["value"] == "user_text":
        ok = h.is_user_text(first, ctx.fmt)
    else:
        ok = h.is_user_text(first, ctx.fmt) or first.get("role") == "assistant"
    return None if ok else f"tail opens with {first.get('role')} message"


def check_kept_messages_between(ctx: _Context, check: dict) -> Reason:
    lo, hi = check["value"]
    kept = ctx.conversations()[2]
    return None if lo <= kept <= hi else f"kept {kept} not in [{lo}, {hi}]"


def check_kept_messages_at_least(ctx: _Context, check: dict) -> Reason:
    kept = ctx.conversations()[2]
    return None if kept >= check["value"] else f"kept {kept} < {check['value']}"


def check_tail_contains_tool_ids(ctx: _Context, check: dict) -> Reason:
    out, _, kept = ctx.conversations()
    tail_calls = {c for m in out[len(out) - kept :] for c in h.calls_of(m, ctx.fmt)}
    missing = [i for i in check["value"] if i not in tail_calls]
    return f"not in the tail: {missing}" if missing else None


def check_tool_ids_present(ctx: _Context, check: dict) -> Reason:
    conv = h.conversation(ctx.output())
    issued = {c for m in conv for c in h.calls_of(m, ctx.fmt)}
    answered = {c for m in conv for c in h.results_of(m, ctx.fmt)}
    missing = [i for i in check["value"] if i not in issued or i not in answered]
    return f"not called and answered: {missing}" if missing else None


def check_last_message_unchanged(ctx: _Context, check: dict) -> Reason:
    out, src, _ = ctx.conversations()
    return None if out and src and out[-1] == src[-1] else "last message differs"


def _signatures(messages: list[dict]) -> set[str]:
    found = set()
    for m in messages:
        for b in h.blocks(m):
            if b.get("type") == "thinking" and b.get("signature"):
                found.add(str(b["signature"]))
            if b.get("type") == "redacted_thinking" and b.get("data"):
                found.add(str(b["data"]))
    return found


def check_thinking_blocks_byte_identical_or_absent(ctx: _Context, check: dict) -> Reason:
    out, src, kept = ctx.conversations()
    start = len(out) - kept
    for i, message in enumerate(out):
        if any(b.get("type") in ("thinking", "redacted_thinking") for b in h.blocks(message)) and i < start:
            return f"thinking block outside the tail (message {i})"
    rest = [m for m in out[:start]] + [
        {**m, "content": [b for b in h.blocks(m) if b.get("type") not in ("thinking", "redacted_thinking")]} for m in out[start:]
    ]
    text = json.dumps(rest, ensure_ascii=False)
    leaked = [s[:16] for s in _signatures(src) if s in text]
    return f"signatures elsewhere in the output: {leaked}" if leaked else None


def _summary(ctx: _Context) -> str:
    out, _, kept = ctx.conversations()
    return h.summary_text(out[: len(out) - kept])


def check_summary_contains(ctx: _Context, check: dict) -> Reason:
    return _items_match(check["value"], _summary(ctx))


def check_summary_excludes(ctx: _Context, check: dict) -> Reason:
    text = _summary(ctx).lower()
    found = [s[:20] for s in check["value"] if s.lower() in text]
    return f"found {found}" if found else None


def check_output_fits_context(ctx: _Context, check: dict) -> Reason:
    value = check["value"]
    total = value["V"] + sum(h.ref_tokens(m) for m in h.conversation(ctx.output()))
    limit = value["ratio"] * value["max_context_tokens"]
    return None if total <= limit else f"V + tokens = {total} > {limit}"


def check_plan_value(ctx: _Context, check: dict) -> Reason:
    got = h.plan_field(_plan(ctx.run), check["field"])
    ok = isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - check["value"]) <= check.get("tol", 0)
    return None if ok else f"{check['field']} = {got!r}, expected {check['value']}"


def check_plan_value_between(ctx: _Context, check: dict) -> Reason:
    lo, hi = check["value"]
    got = h.plan_field(_plan(ctx.run), check["field"])
    return None if isinstance(got, (int, float)) and lo <= got <= hi else f"{check['field']} = {got!r} not in [{lo}, {hi}]"


def check_total_tokens_between(ctx: _Context, check: dict) -> Reason:
    return check_plan_value_between(ctx, {"field": "T", "value": check["value"]})


def _image_delta(ctx: _Context) -> float:
    if "image_delta" not in ctx.run.extra:
        workspace = ctx.run.run_dir.parent / "without-images"
        rerun = h.execute(ctx.run.case, ctx.run.folder, workspace, transform=h.remove_images)
        ctx.run.extra["image_delta"] = h.plan_field(_plan(ctx.run), "T") - h.plan_field(_plan(rerun), "T")
    return ctx.run.extra["image_delta"]


def check_image_tokens_at_most(ctx: _Context, check: dict) -> Reason:
    delta = _image_delta(ctx)
    return None if delta <= check["value"] else f"T(input) - T(no images) = {delta} > {check['value']}"


def check_image_tokens_at_least(ctx: _Context, check: dict) -> Reason:
    delta = _image_delta(ctx)
    return None if delta >= check["value"] else f"T(input) - T(no images) = {delta} < {check['value']}"


def check_any_of(ctx: _Context, check: dict) -> Reason:
    reasons = []
    for alternative in check["value"]:
        failed = _failures(ctx, alternative)
        if not failed:
            return None
        reasons.append("; ".join(failed))
    return "no alternative passes: " + " | ".join(reasons)


CHECKS = {name[len("check_") :]: fn for name, fn in globals().items() if name.startswith("check_")}


def _failures(ctx: _Context, expect: list[dict]) -> list[str]:
    """Failed checks of ``expect``, in order, as ``name: reason``."""
    failed = []
    for check in expect:
        try:
            reason = CHECKS[check["check"]](ctx, check)
        except (AssertionError, ValueError, OSError, TypeError, KeyError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            failed.append(f"{check['check']}: {reason}")
    return failed


def evaluate(run: h.Run) -> list[str]:
    """The failed checks of the case's ``expect`` list (empty: the case passes)."""
    return _failures(_Context(run), run.case["expect"])


def load_case(folder: Path) -> dict[str, Any]:
    """case.json of a case folder."""
    return json.loads((folder / "case.json").read_text("utf-8"))
