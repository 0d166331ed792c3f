"""Every text the command line prints from a result: plans, profiles, compactions, archive hits,
replay tables and the calibration report. Formatting only: the numbers come computed.

Renderers take the JSON-ready dicts of the results (``Plan.to_dict()``, ``SessionReplay.to_dict()``
...) or the result objects where no dict exists (profiles, the calibration), so that ``--json``
and the tables always show the same values.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dp_compact.core.benefit import TERM_LABELS
from dp_compact.measure.windows import window_note

if TYPE_CHECKING:
    from dp_compact.calibration import Calibration, Estimate
    from dp_compact.core.planner import Plan
    from dp_compact.pricing import Prices

__all__ = [
    "JSON_ALIASES",
    "money",
    "plan_json",
    "render_calibration",
    "render_compaction",
    "render_detectors",
    "render_directory",
    "render_hits",
    "render_plan",
    "render_policy_table",
    "render_profiles",
    "render_receipts",
    "render_session",
]

#: Descriptive names of the plan's one-letter JSON keys (DESIGN §1); both are printed. The
#: one-letter keys that differ only by case (k/K, t/T) are kept one more release as aliases.
JSON_ALIASES = {
    "k": "kept_messages",
    "N": "messages",
    "T": "total_tokens",
    "K": "kept_tokens",
    "H": "dropped_tokens",
    "t": "user_turns",
}


def money(value: float) -> str:
    """A price in $/MTok without losing digits (0.125, not 0.12).

    >>> money(3.0), money(0.125)
    ('3.00', '0.125')
    """
    return f"{value:.2f}" if round(value, 2) == value else f"{value:g}"


def plan_json(data: dict[str, Any]) -> dict[str, Any]:
    """``Plan.to_dict()`` data with the descriptive keys of :data:`JSON_ALIASES` added after the
    one-letter ones (also in ``best_candidate``).

    >>> plan_json({"k": 5, "K": 700, "best_candidate": {"k": 3, "cut": 9}})
    {'k': 5, 'K': 700, 'best_candidate': {'k': 3, 'cut': 9, 'kept_messages': 3}, 'kept_messages': 5, 'kept_tokens': 700}
    """
    out = dict(data)
    if isinstance(out.get("best_candidate"), dict):
        out["best_candidate"] = {**out["best_candidate"], "kept_messages": out["best_candidate"]["k"]}
    out.update({name: data[key] for key, name in JSON_ALIASES.items() if key in data})
    return out


def _plan_lines(data: dict[str, Any]) -> list[str]:
    """Session, decision, keep and context lines of a plan."""
    session, window = data["session"], data["max_context_tokens"]
    noun = "message" if data["N"] == 1 else "messages"
    lines = [
        f"session   {session['path']}  ({session['format']}, {data['N']} {noun}, {data['T']:,} tokens)",
        f"decision  {data['decision'].upper()}  [rule: {data['rule']}]",
        f"          {data['explanation']}",
    ]
    native = (data.get("lookahead") or {}).get("native")
    if native:
        verb = "compacts" if data["decision"] == "compact" else "would compact"
        kept = (f"keeps the {native['kept_messages']} user message{'s' if native['kept_messages'] != 1 else ''}"
                f" ({native['kept_tokens']:,} tokens)" if native["kept_messages"] else "keeps no message")
        lines.append(f"native    the provider ({native['action']}) {verb}: it {kept}, drops {native['dropped_tokens']:,} tokens,"
                     f" its request reads the whole context; expected loss ${native['loss_usd']:.4f}")
    elif data["decision"] == "compact":
        lines.append(
            f"keep      k = {data['k']} of {data['N']} messages (cut at message {data['cut']}): "
            f"kept {data['K']:,} tokens, dropped {data['H']:,} tokens"
        )
    elif data["decision"] == "clear" and data.get("clearing"):
        c = data["clearing"]
        lines.append(
            f"clear     the long tool results of {c['cleared_messages']} message{'s' if c['cleared_messages'] != 1 else ''}"
            f" before message {c['depth']}: {c['saved_tokens']:,} tokens out, every message kept; the cache rewritten from"
            f" message {c['first_changed_message']} ({c['rewritten_tokens']:,} tokens); `dp-compact compact` does it"
        )
    elif data["best_candidate"]:
        best = data["best_candidate"]
        against = ""
        if data.get("lookahead") and best["net"] > 0:  # the single-step term is against never compacting, not against waiting
            against = " against never compacting" + ("; waiting is cheaper still, see ahead below" if data["rule"] == "wait" else "")
        lines.append(f"keep      all {data['N']} {noun} (best candidate: k = {best['k']}, NetBenefit ${best['net']:+.4f}{against})")
    lines.append(
        f"context   {data['context_tokens']:,} / {window:,} tokens ({100 * data['context_tokens'] / window:.1f} %,"
        f" from {data['context_source']}); forced above {data['force_threshold_tokens']:,}"
    )
    if data.get("window_source"):
        lines.append(f"window    {window:,} tokens: {data['window_source']}")
    return lines


def _ahead_line(ahead: dict[str, Any]) -> str:
    """The look-ahead planner's line (DESIGN §7)."""
    waits = ahead["next_compaction_calls"]
    when = "never within the horizon" if waits is None else f"in about {waits:.0f} call{'s' if waits != 1 else ''}"

    def usd(value: float | None) -> str:
        return "not allowed" if value is None else f"${value:.4f}"

    if ahead["keep_usd"] is None:
        saves = "keeping is not allowed"
    elif ahead["compact_usd"] is None:
        saves = "set aside by the rule of one round" if ahead.get("loss_rule") else "compacting is not possible now"
    else:
        gain = ahead['saves_usd']
        saves = f"compacting now saves ${gain:.4f}" if gain >= 0 else f"compacting now costs ${-gain:.4f} more"
    where = "the provider's compaction" if ahead.get("native") else "compact at the best cut"
    again = " (where the same rule applies)" if ahead.get("loss_rule") else ""
    return (
        f"ahead     expected cost from now on: keep {usd(ahead['keep_usd'])}, {where}"
        f" {usd(ahead['compact_usd'])} ({saves}); if it waits, the best schedule compacts {when}{again};"
        f" growth {ahead['growth_tokens']:,.0f} tokens/call, about {ahead['expected_calls']:.0f} calls to come,"
        f" S = {ahead['summary_tokens']:,.0f}"
        + (f"; clear old tool results at the best depth {usd(ahead['clear_usd'])}" if ahead.get("clear_usd") is not None else "")
    )


def duration(seconds: float) -> str:
    """Seconds as people read them.

    >>> duration(42), duration(300), duration(7260), duration(200_000)
    ('42 s', '5 min', '2 h 1 min', '2 d 7 h')
    """
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _time_lines(timing: dict[str, Any]) -> list[str]:
    """The plan's time lines (DESIGN §8): the silence and the cache, the write lifetime that pays."""
    lines = []
    ttl = timing["cache_ttl_s"]
    life = "never expires" if ttl is None else f"lives {duration(ttl)} after its last use ({timing['ttl_source']})"
    if timing["idle_s"] is not None:
        state = ("cold: the next request rewrites the whole prompt, so compacting costs no extra rewrite" if timing["cold_now"]
                 else "warm")
        lines.append(f"time      {duration(timing['idle_s'])} since the last call (now: {timing['source']}); the cache {life}: {state}")
        if timing["turn_end"] and not timing["cold_now"]:
            hazard = timing["hazard"]
            lines.append(f"          the agent waits for the person: the cache will have expired when they answer with chance"
                         f" {timing['cold_chance']:.0%} (idle hazard: {hazard['after_5m']:.0%} of answers after 5 min,"
                         f" {hazard['after_1h']:.0%} after 1 h; {hazard['source']})")
    else:
        lines.append(f"time      the silence since the last call is unknown (the transcript records no call times: a timeless"
                     f" plan); the cache {life}")
    life_costs = timing.get("lifetime")
    if life_costs:
        other = "5m" if life_costs["better"] == "1h" else "1h"
        name = {"5m": "5-minute", "1h": "1-hour"}
        verdict = ("the session uses it" if life_costs["current"] == life_costs["better"]
                   else f"the session writes {name[life_costs['current']]} entries")
        lines.append(
            f"lifetime  {name[life_costs['better']]} cache writes pay for this session's rhythm: ${life_costs['saves_usd']:.4f}"
            f" less than {name[other]} ones over its calls (5 min: ${life_costs['usd_5m']:.4f}, {life_costs['cold_5m']} cold"
            f" calls; 1 h: ${life_costs['usd_1h']:.4f}, {life_costs['cold_1h']} cold); {verdict}")
    elif timing.get("lifetime_note"):
        lines.append(f"lifetime  {timing['lifetime_note']}")
    return lines


def _tier_line(tiers: dict[str, Any]) -> str:
    """The plan's price-tier line (DESIGN §8): the next cliff and whether compacting before it pays."""
    cliff = tiers.get("next")
    if cliff is None:
        return f"tiers     the prompt pays the tier {tiers['tier_now']}; no threshold above it"
    above = cliff["above"]
    when = cliff.get("compaction_calls")
    now = "the plan clears old tool results now" if cliff.get("action") == "clear" else "the plan compacts now"
    pays = ("compacting before it pays: " + (now if when == 0 else f"the best schedule compacts in about"
                                             f" {when:.0f} calls") if cliff.get("compacts_before")
            else "compacting before it does not pay: the best schedule crosses it")
    return (f"tiers     next cliff at {cliff['above_tokens']:,} prompt tokens: {cliff['tokens_to_go']:,} tokens, about"
            f" {cliff['calls_to_go']} calls to go; above it every token of a request pays input {money(above['p_input'])} /"
            f" cache {money(above['p_cache'])} / output {money(above['p_out'])} $/MTok; {pays}")


def render_plan(data: dict[str, Any]) -> str:
    """A plan (``Plan.to_dict()`` plus ``window_source``) as a readable table."""
    prices, window = data["prices"], data["max_context_tokens"]
    lines = _plan_lines(data)
    ahead = data.get("lookahead")
    if ahead:
        lines.append(_ahead_line(ahead))
    if data.get("timing"):
        lines.extend(_time_lines(data["timing"]))
    if data.get("tiers"):
        lines.append(_tier_line(data["tiers"]))
    if not (ahead or {}).get("native") and (data["decision"] == "compact" or data["best_candidate"]):
        where = "chosen cut" if data["decision"] == "compact" else "best candidate"
        if data["decision"] == "clear" and data["best_candidate"]:
            where = f"best cut for compacting (k = {data['best_candidate']['k']}; the plan clears instead)"
        if ahead:
            where += ", the single-step model's terms for reference"
        lines.append(f"terms at the {where} ($):")
        for key, label, sign in TERM_LABELS:
            lines.append(f"  {label:<32} {sign}{data['terms'][key]:.6f}")
        lines.append(f"  {'NetBenefit':<32} {data['terms']['net']:+.6f}")
    lines.append(
        f"estimates E = {data['E']:g} turns, L = {data['L']:.3g} calls/turn ({data['L_source']}), R = {data['R']:.4g} calls,"
        f" avg = {data['avg']:,.0f} tokens ({data['avg_source']}), c = {data['c']}, t = {data['t']},"
        f" min_keep = {data['min_keep']}, feasible cuts = {data['n_feasible_cuts']}"
        + (f", V = {data['v_tokens']:,} tokens ({data['v_source']})" if data.get("v_source") else "")
    )
    lines.append(
        f"profile   {prices['name']}: input {money(prices['p_input'])} / cache {money(prices['p_cache'])} /"
        f" output {money(prices['p_out'])} $/MTok{write_text(prices)}; window {window:,}; planner {data.get('planner', 'myopic')},"
        f" model {data['settings']['model']}, tokenizer {data['settings']['tokenizer']}"
    )
    shown = window_note(window, data["window_source"]) if data.get("window_source") else None
    lines.extend(f"note      {note}" for note in data["notes"] if note != shown)
    return "\n".join(lines)


def write_text(prices: dict[str, Any]) -> str:
    """``", write 10.00 (1-hour entries)"``: the cache-write price at the session's write mix, and
    the whole-request tiers; "" for a provider without a write premium nor tiers."""
    text = ""
    if prices.get("p_cache_write") is not None or prices.get("p_cache_write_1h") is not None:
        share = prices.get("write_1h_share", 0.0)
        mix = "1-hour entries" if share >= 1 else "5-minute entries" if share <= 0 else f"{share:.0%} 1-hour entries"
        price = money(prices["p_write"]) if share in (0, 1) else f"{prices['p_write']:.2f}"  # a blend has no exact digits to keep
        text = f", write {price} ({mix})"
    tiers = prices.get("tiers") or []
    if tiers:
        text += "; whole request above " + ", ".join(f"{t['above_tokens']:,} tokens: input {money(t['p_input'])} / cache {money(t['p_cache'])}"
                                                    f" / output {money(t['p_out'])}" for t in tiers)
    return text


def render_profiles(rows: list[Prices]) -> str:
    """The pricing profiles, prices spelled as plans print them ($/MTok; window in tokens): input,
    cache read, cache write for 5-minute and 1-hour entries, output, window, and whole-request tiers."""
    lines = [f"{'profile':<20} {'input':>7} {'cache':>7} {'write':>7} {'write1h':>7} {'output':>7} {'window':>10}  ($/MTok, tokens)"]
    for p in rows:
        write = money(p.p_cache_write) if p.p_cache_write is not None else "-"
        hour = money(p.p_cache_write_1h) if p.p_cache_write_1h is not None else "-"
        tiers = "".join(f"; above {t.start_tokens:,}: {money(t.p_input)} / {money(t.p_cache)} / {money(t.p_out)}" for t in p.tiers)
        lines.append(
            f"{p.name:<20} {money(p.p_input):>7} {money(p.p_cache):>7} {write:>7} {hour:>7} {money(p.p_out):>7} {p.max_context_tokens:>10,}{tiers}"
        )
    lines.append("Profiles are written by hand from each provider's pricing page. Any other model name is looked up in")
    lines.append("genai-prices' bundled price data (offline), at the price in force on the session's date.")
    return "\n".join(lines)


def curve_lines(plans: list[Plan]) -> list[str]:
    """One line per plan drawn by ``curve`` (profile · model: decision, k, rule), then the window notes."""
    lines = [f"{p.prices.name} · {p.settings['model']}: {p.decision} (k = {p.k}, rule {p.rule})" for p in plans]
    lines += dict.fromkeys(window_note(p.prices.max_context_tokens, p.prices.window_source) for p in plans if p.prices.window_source)
    return lines


def render_hits(hits: list[dict[str, Any]], folder: Any = None) -> str:
    """Archive search hits (``ArchiveHit.to_dict()``) as readable lines; with none, the archive
    folder searched (``DP_ARCHIVE_DIR``) when given."""
    if not hits:
        return "no matching archive" + (f" in {folder} (set DP_ARCHIVE_DIR to search another)" if folder is not None else "")
    lines = []
    for hit in hits:
        lines.append(f"{hit['ref']}  {hit['created']}  {hit['message_count']} messages  score {hit['score']:.3g}")
        lines.append(f"  {' '.join(hit['summary'].split()) or '(no summary)'}")
        if hit["snippet"]:
            lines.append(f"  match: {' '.join(hit['snippet'].split())}")
    return "\n".join(lines)


def render_compaction(data: dict[str, Any]) -> str:
    """A compaction result (``CompactionResult.to_dict()``) as readable lines."""
    if data["decision"] != "compact":
        return f"nothing to do for {data['path']}: {data['explanation']} [rule: {data['rule']}]; nothing written"
    head = f"messages 0..{data['cut'] - 1}" if data["cut"] > 1 else "message 0"
    lines = [
        f"{'would compact' if data['dry_run'] else 'compacted'} {data['path']} ({data['format']} -> {data['api']}) [rule: {data['rule']}]",
        f"  {data['explanation']}",
        f"drop      {data['cut']} messages ({head}, {data['head_tokens']:,} tokens) into a {data['summary_tokens']:,}-token summary ({data['summarizer']})",
        f"keep      {data['k']} of {data['n_messages']} messages verbatim (from message {data['cut']}, {data['tail_tokens']:,} tokens)",
    ]
    lines += [f"anchor    #{a['index']} {a['role']}: {a['snippet']}" for a in data["anchors"]]
    if data["dry_run"]:
        lines.append(f"archive   would archive the {data['cut']} dropped messages verbatim (nothing written; the summary's"
                     " reference is a placeholder of the same shape)")
        lines += ["summary   " + line for line in data["summary"].splitlines()]
    else:
        ref = data["archive_ref"]
        lines.append(f"archive   {ref} (dp-compact restore {ref}#msg-N gives message N)" if ref else "archive   not archived")
        lines.append(f"output    {data['output']}")
    return "\n".join(lines)


# ---- replay (DESIGN §6) ----

_HEADER = (
    f"{'policy':<20} {'total $':>10} {'reads $':>9} {'input $':>9} {'writes $':>9} {'output $':>9} {'compact $':>9}"
    f" {'loss $':>9} {'S':>6} {'compactions':>11} {'forced':>6} {'refetches':>9} {'overflows':>9} {'truncated':>9}"
    f" {'clearings':>9} {'peak ctx':>9} {'mean ctx':>9}"
    f" {'vs best fixed':>13} {'vs oracle':>9}"
)


def _ratio(value: float | None) -> str:
    """``0.62x`` or ``-``."""
    return f"{value:.2f}x" if value is not None else "-"


def render_policy_table(rows: list[dict[str, Any]]) -> str:
    """One line per policy: $ per term, S (``-`` for a policy that wrote no summary), counts (compactions,
    of them forced on an overflow; refetches; overflows; hard truncations; clearings of old tool results),
    peak and mean context (tokens), ratios to the best fixed rule and the oracle."""
    lines = [_HEADER]
    for r in rows:
        summary = f"{r['summary_tokens']:,}" if r['compactions'] else "-"
        lines.append(
            f"{r['policy']:<20} {r['total_usd']:>10.4f} {r['cache_read_usd']:>9.4f} {r['input_usd']:>9.4f}"
            f" {r['write_usd']:>9.4f} {r['output_usd']:>9.4f} {r['compaction_usd']:>9.4f} {r['loss_usd']:>9.4f}"
            f" {summary:>6} {r['compactions']:>11} {r.get('forced', 0):>6} {r['refetches']:>9}"
            f" {r['overflows']:>9} {r['truncations']:>9} {r.get('clearings', 0):>9} {r['peak_context_tokens']:>9,} {r['mean_context_tokens']:>9,.0f}"
            f" {_ratio(r['vs_best_fixed']):>13} {_ratio(r['vs_oracle']):>9}"
        )
    return "\n".join(lines)


def _prices_line(data: dict[str, Any]) -> str:
    """The prices, window, V, S and TTL of a session report."""
    p = data["prices"]
    ttl = f"{data['cache_ttl_s']:g} s" if data["cache_ttl_s"] is not None else "none"
    return (
        f"prices    {p['name']}: input {money(p['p_input'])} / cache {money(p['p_cache'])} / output {money(p['p_out'])} $/MTok{write_text(p)};"
        f" window {data['max_context_tokens']:,}; V {data['v_tokens']:,} tokens; cache TTL {ttl}; lost information: {data['loss']}"
        f", {_detector_text(data.get('detector', 'verbatim'))}"
    )


def _detector_text(detector: str) -> str:
    """``verbatim detector``, ``strict detector``, or under ``both`` the one the table shows and where the other is."""
    return "verbatim detector (strict beside it below)" if detector == "both" else f"{detector} detector"


def _ttl_line(data: dict[str, Any]) -> str:
    """The cache TTL applied and why, and the measured cache-hit share (DESIGN §8)."""
    reason = data.get("cache_ttl_reason") or ("none" if data["cache_ttl_s"] is None else f"{data['cache_ttl_s']:g} s")
    share = data.get("cache_hit_share", 1.0)
    hits = "" if share >= 1.0 else f"; cache hits {share * 100:.1f} % of the cached prefix (measured from its usage)"
    return f"cache     TTL {reason}{hits}"


def _signed(value: float) -> str:
    """``+$0.0123`` / ``-$0.0123``."""
    return f"{'-' if value < 0 else '+'}${abs(value):.4f}"


def bill_lines(bill: dict[str, Any] | None) -> list[str]:
    """The bill check of a session report (``bill_check``): the bill, the recorded replay, their
    ratio, and the named causes of the difference with $ each (the zero ones left out)."""
    if bill is None:
        return []
    verdict = "within" if bill["within_tolerance"] else "OUTSIDE"
    lines = [f"bill      ${bill['bill_usd']:.4f} from {bill['records']} usage records; recorded replay ${bill['recorded_usd']:.4f}"
             f" ({bill['ratio']:.3f}x, {verdict} {bill['tolerance'] * 100:g} %); difference {_signed(bill['difference_usd'])}"]
    for cause in bill["causes"]:
        if cause["count"] or abs(cause["usd"]) >= 5e-5:
            lines.append(f"          {_signed(cause['usd'])} {cause['cause']} ({cause['count']}): {cause['detail']}")
    return lines


def verdict(policies: list[dict[str, Any]]) -> str | None:
    """One line that reads the policy table (rows with ``policy``, ``fixed``, ``total_usd``): dp-compact
    against the cheapest fixed rule, and against the hindsight optimum; None without ``dp`` or a fixed rule.

    >>> verdict([{"policy": "dp", "fixed": False, "total_usd": 1.5}, {"policy": "never", "fixed": True, "total_usd": 2.0},
    ...          {"policy": "oracle", "fixed": False, "total_usd": 1.2}])
    'verdict   dp-compact $1.5000, 25 % less than the best fixed rule (never, $2.0000); 1.25 x the hindsight optimum (oracle, $1.2000: what knowing the future would cost)'
    """
    rows = {p["policy"]: p for p in policies}
    fixed = [p for p in policies if p.get("fixed")]
    dp = rows.get("dp")
    if dp is None or not fixed:
        return None
    best = min(fixed, key=lambda p: p["total_usd"])
    ours, theirs = float(dp["total_usd"]), float(best["total_usd"])
    change = (theirs - ours) / theirs if theirs > 0 else 0.0
    than = (f"{change:.0%} less than" if change > 0.005 else f"{-change:.0%} more than" if change < -0.005 else "the same as").replace("%", " %")
    text = f"verdict   dp-compact ${ours:.4f}, {than} the best fixed rule ({best['policy']}, ${theirs:.4f})"
    oracle = rows.get("oracle")
    if oracle is not None and float(oracle["total_usd"]) > 0:
        text += (f"; {ours / float(oracle['total_usd']):.2f} x the hindsight optimum (oracle, ${float(oracle['total_usd']):.4f}:"
                 " what knowing the future would cost)")
    return text


#: What each policy of a replay is, in a few words (the legend under the table).
POLICY_WORDS = {
    "oracle": "the cheapest schedule in hindsight",
    "dp": "dp-compact",
    "seed": "the planner dp-compact started from (DP_MODEL=seed: user-turn cuts only)",
    "never": "compacts only when a prompt would not fit the window",
    "recorded": "what the tool did",
}


def policy_legend(policies: list[str]) -> str | None:
    """One line saying what the policies of a replay table are, or None when it holds only fixed rules."""
    said = [f"{name}: {POLICY_WORDS[name]}" for name in policies if name in POLICY_WORDS]
    if not said:
        return None
    rules = [name for name in policies if name not in POLICY_WORDS]
    if rules:
        said.append(f"{', '.join(rules)}: " + ("that tool's fixed rule" if len(rules) == 1 else "those tools' fixed rules"))
    return "policies  " + "; ".join(said)


def _live(session: dict[str, Any]) -> str:
    """The live part of a recording that compacted before, as ``plan`` counts it ("" when it is the whole)."""
    live = session.get("live_messages")
    return "" if live is None or live == session["messages"] else f", of which plan reads the {live:,} after its last compaction"


def render_session(data: dict[str, Any]) -> str:
    """A session replay (``SessionReplay.to_dict()``) as a header and the policy table."""
    s = data["session"]
    source = "output tokens from usage records" if s["call_source"] == "usage" else "output tokens counted from messages"
    timed = f", {s['timed_calls']} timed" if data["cache_ttl_s"] is not None else ""
    best = data["best_fixed_usd"]
    lines = [
        f"session   {s['path']}  ({s['format']}; {s['messages']} messages in the whole recording{_live(s)}, {s['calls']} calls{timed};"
        f" {source};"
        f" {s['uses']} {'use' if s['uses'] == 1 else 'uses'} of earlier messages)",
        _prices_line(data),
        _ttl_line(data),
        *bill_lines(data.get("bill_check")),
        f"assumes   {data['assumption']}",
        f"floor     ${data['prefix_floor_usd']:.4f} (every call reads only V from cache, plus its recorded output)",
        render_policy_table(data["policies"]),
    ]
    if best is not None:
        lines.append(f"best fixed policy: ${best:.4f}")
    if (said := verdict(data["policies"])) is not None:
        lines.append(said)
    if (legend := policy_legend([row["policy"] for row in data["policies"]])) is not None:
        lines.append(legend)
    if data.get("by_detector"):
        lines += ["", render_detectors(data["by_detector"])]
    if data.get("receipts") is not None:
        lines += ["", render_receipts(data["receipts"])]
    lines += [f"note      {note}" for note in data["notes"]]
    return "\n".join(lines)


#: What each detector counts as a later use of a dropped message (DESIGN §6, §9).
_DETECTED = {
    "verbatim": "200 characters repeated, or a read file edited",
    "strict": "also a path, identifier or command named again",
}


def render_detectors(runs: list[dict[str, Any]]) -> str:
    """The policy ranking under each detector side by side (``by_detector`` or ``totals_by_detector``):
    per policy its total $, ratio to the oracle, rank and refetches under each, and how its rank moved."""
    first, *others = runs
    head = f"{'policy':<20}" + "".join(f" {r['detector'] + ' $':>11} {'vs oracle':>9} {'rank':>4} {'refetches':>9}" for r in runs)
    lines = ["ranking under both detectors (" + "; ".join(f"{r['detector']}: {_DETECTED.get(r['detector'], '')},"
                                                       f" {r['uses']:,} uses" for r in runs) + "):",
             head + f" {'rank moved':>10}"]
    for index, row in enumerate(first["policies"]):
        cells = "".join(f" {r['policies'][index]['total_usd']:>11.4f} {_ratio(r['policies'][index]['vs_oracle']):>9}"
                        f" {r['policies'][index]['rank']:>4} {r['policies'][index]['refetches']:>9}" for r in runs)
        moved = others[-1]["policies"][index]["rank"] - row["rank"] if others else 0
        shift = "=" if moved == 0 else f"down {moved}" if moved > 0 else f"up {-moved}"
        lines.append(f"{row['policy']:<20}{cells} {shift:>10}")
    return "\n".join(lines)


def _clock(iso: str | None) -> str:
    """``2026-04-26T22:33:29Z`` as ``04-26 22:33:29``; ``-`` when unknown."""
    return f"{iso[5:10]} {iso[11:19]}" if iso else "-"


def _paid_back(r: dict[str, Any]) -> str:
    """When a receipt paid back, or why it did not."""
    if r["paid_back_call"] is not None:
        needed = f"; needed by call {r['needed_at_call']}" if r["needed_at_call"] is not None else ""
        return f"call {r['paid_back_call']}" + (f" ({_clock(r['paid_back_time'])})" if r["paid_back_time"] else "") + needed
    if r["needed_at_call"] is not None:
        return f"needed: call {r['needed_at_call']} would not fit without it"
    if r["until_call"] == r["call"]:
        return "another compaction at the same call"
    return f"not by the next compaction (call {r['until_call']})" if r["next_compaction"] else "not by the end"


def _used_again(used: list[dict[str, Any]], shown: int = 4) -> str:
    """``message@call`` of the first few uses of what it dropped, and how many more."""
    if not used:
        return "-"
    text = ", ".join(f"m{u['message']}@c{u['call']}" for u in used[:shown])
    return text + (f" +{len(used) - shown} more" if len(used) > shown else "")


def render_receipts(policies: list[dict[str, Any]]) -> str:
    """Every compaction's receipt per policy (``receipts`` of a session report): its call and time,
    messages dropped, its cost (request, cache rewrite), what it saved on the calls that followed up
    to the next compaction, the net, when it paid back, what it dropped that was used again
    (message index @ call index)."""
    lines = []
    for p in policies:
        source = p["receipts"][0]["source"] if p["receipts"] else "replay"
        plural = "" if p["compactions"] == 1 else "s"
        clearings = p.get("clearings", 0)
        cleared = f", {clearings} clearing{'' if clearings == 1 else 's'} of old tool results" if clearings else ""
        lines.append(f"receipts  {p['policy']}: {p['compactions']} compaction{plural}{cleared}; requests ${p['request_usd']:.4f}, cache rewrites"
                     f" ${p['rewrite_usd']:.4f}; saved ${p['saved_usd']:.4f} on the calls that followed ({source});"
                     f" net {_signed(p['net_usd'])}; {p['paid_back']} paid back")
        if not p["receipts"]:
            continue
        lines.append(f"{'#':>4} {'call':>5} {'time (UTC)':>14} {'dropped':>7} {'summary':>7} {'request $':>9} {'rewrite $':>9}"
                     f" {'saved $':>9} {'net $':>9}  {'paid back':<48} used again")
        for r in p["receipts"]:
            forced = "*" if r["forced"] else ("c" if r.get("action") == "clear" else " ")
            lines.append(f"{r['number']:>3}{forced} {r['call']:>5} {_clock(r['time']):>14} {r['dropped_messages']:>7}"
                         f" {r['summary_tokens']:>7,} {r['request_usd']:>9.4f} {r['rewrite_usd']:>9.4f} {r['saved_usd']:>9.4f}"
                         f" {r['net_usd']:>+9.4f}  {_paid_back(r):<48} {_used_again(r['used_again'])}")
    if any(r["forced"] for p in policies for r in p["receipts"]):
        lines.append("* forced by an overflow")
    if any(r.get("action") == "clear" for p in policies for r in p["receipts"]):
        lines.append("c a clearing of old tool results: dropped = messages cleared, summary = tokens taken out, no request")
    return "\n".join(lines)


def render_directory(data: dict[str, Any]) -> str:
    """A folder replay (``DirectoryReplay.to_dict()``): total $ per session and policy, the totals table, the files skipped."""
    names = data["policies"]
    width = max([12, *(len(n) + 1 for n in names)])
    lines = [f"{'session':<36} {'calls':>6} {'V':>8}" + "".join(f"{n:>{width}}" for n in names)]
    unmeasured = False
    for report in data["sessions"]:
        s = report["session"]
        totals = "".join(f"{p['total_usd']:>{width}.4f}" for p in report["policies"])
        mark = "" if report.get("v_source") == "measured" else "*"
        unmeasured = unmeasured or bool(mark)
        v_text = f"{report['v_tokens']:,}{mark}"
        lines.append(f"{Path(s['path']).name[:36]:<36} {s['calls']:>6} {v_text:>8}{totals}")
    rows = data["totals"]
    calls = rows[0]["calls"] if rows else 0
    lines.append(f"{'total':<36} {calls:>6} {'':>8}" + "".join(f"{r['total_usd']:>{width}.4f}" for r in rows))
    lines.append(f"{'vs best fixed':<36} {'':>6} {'':>8}" + "".join(f"{_ratio(r['vs_best_fixed']):>{width}}" for r in rows))
    if any(r["vs_oracle"] is not None for r in rows):
        lines.append(f"{'vs oracle':<36} {'':>6} {'':>8}" + "".join(f"{_ratio(r['vs_oracle']):>{width}}" for r in rows))
    if (said := verdict(rows)) is not None:
        lines.append(said)
    lines.append("V: each session's fixed prefix, tokens, measured from its usage records"
                 + (" or, marked *, DP_V (given, or none measured)" if unmeasured else ""))
    lines += ["", (f"totals over {len(data['sessions'])} sessions ($, tokens; lost information: {data['loss']},"
                   f" {_detector_text(data.get('detector', 'verbatim'))}):"),
              render_policy_table(rows), f"assumes   {data['assumption']}"]
    if data.get("totals_by_detector"):
        lines += ["", render_detectors(data["totals_by_detector"])]
    lines += _bill_table(data["sessions"])
    lines += [f"skipped   {path}: {reason}" for path, reason in ((k["path"], k["reason"]) for k in data["skipped"])]
    return "\n".join(lines)


def _bill_table(reports: list[dict[str, Any]]) -> list[str]:
    """Per session with usage records: the bill, the recorded replay, their ratio, the TTL and the
    named causes of the difference ($, the zero ones left out)."""
    rows = [r for r in reports if r.get("bill_check")]
    if not rows:
        return []
    lines = ["", "bill check (the recorded replay against the bill of the usage records, same prices):",
             f"{'session':<36} {'bill $':>9} {'recorded $':>10} {'ratio':>6} {'TTL':>6} {'hits':>6}  causes of the difference"]
    for report in rows:
        bill = report["bill_check"]
        ttl = f"{report['cache_ttl_s']:g}" if report["cache_ttl_s"] is not None else "none"
        causes = ", ".join(f"{c['cause']} {_signed(c['usd'])}" for c in bill["causes"] if abs(c["usd"]) >= 5e-5) or "-"
        lines.append(f"{Path(report['session']['path']).name[:36]:<36} {bill['bill_usd']:>9.4f} {bill['recorded_usd']:>10.4f}"
                     f" {bill['ratio']:>6.3f} {ttl:>6} {report.get('cache_hit_share', 1.0):>6.3f}  {causes}")
    return lines


# ---- calibration ----

def _estimate(e: Estimate | None, spec: str = ",.0f") -> str:
    """``value ± std [p05, p95] (n)``; one session says it is weak; never ``nan``."""
    if e is None or not math.isfinite(e.value):
        return "not measured"
    if e.n < 2:
        return f"{e.value:{spec}}  (n = {e.n}: one session, no spread; a weak estimate)"
    if not math.isfinite(e.std):
        return f"{e.value:{spec}}  (n = {e.n}: too few sessions for a spread; a weak estimate)"
    return f"{e.value:{spec}} ± {e.std:{spec}}  [5–95 %: {e.p05:{spec}} – {e.p95:{spec}}]  (n = {e.n})"


def _number(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``-`` when missing or not finite."""
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def render_calibration(c: Calibration) -> str:
    """The calibration (:func:`dp_compact.calibration.calibrate`) as a readable table."""
    from dp_compact.calibration.fit import SURVIVAL_SCALE_LIMIT

    lines = [f"sessions  {len(c.sessions)} read ({sum(1 for s in c.sessions if s.prompt_tokens.size)} with usage records),"
             f" {len(c.skipped)} skipped; spreads: bootstrap over sessions, {c.bootstrap} resamples"]
    lines.append(f"V         {_estimate(c.v_tokens)} tokens (first call's prompt − its messages)")
    lines.append(f"L         {_estimate(c.calls_per_turn, '.1f')} calls per user turn (pooled)")
    lines.append(f"avg       {_estimate(c.avg_tokens)} prompt tokens per call (median of sessions)")
    if c.summary_tokens is None or not math.isfinite(c.summary_tokens.value):
        lines.append("S         not measured: no summary seen in the files")
    else:
        lines.append(f"S         {_estimate(c.summary_tokens)} cl100k tokens per summary seen in the files")
    for tool, tokens in c.recorded_summaries.items():
        listed = ", ".join(f"{n:,}" for n in tokens)
        lines.append(f"summary   {tool:<11} {sum(tokens) / len(tokens):,.0f} tokens on average ({listed}): the summaries its recorded compactions wrote")
    for family, e in c.token_ratios.items():
        lines.append(f"ratio     {family:<10} {_estimate(e, '.3f')} reported / cl100k tokens")
    if c.survival is not None:
        alpha, scale = c.survival
        lines.append(f"survival  alpha = {_estimate(alpha, '.2f')}, scale = {_estimate(scale, ',.1f')} calls: P(a session lasts more than"
                     " n calls) = (1 + n / scale) ** -alpha (DP_SURVIVAL_ALPHA, DP_SURVIVAL_SCALE)")
        if scale.value >= SURVIVAL_SCALE_LIMIT and alpha.value > 1:
            lines.append(f"          the lengths vary no more than an exponential's: the fit is its limit, mean"
                         f" {scale.value / (alpha.value - 1):,.0f} calls (more sessions may show a heavier tail)")
    if c.idle is not None:
        lines.append(f"idle      P(answer after 5 min) = {_estimate(c.idle.after_5m, '.3f')}, P(after 1 h) = {_estimate(c.idle.after_1h, '.3f')}"
                     f" over {c.idle.n_gaps} gaps after a final answer in {len(c.idle.gaps)} sessions (the idle hazard, DESIGN §8;"
                     " dp-compact plan --idle-hazard)")
    for unit, (fit, q0, tau) in c.recall_fits.items():
        unit_scale = "user turns" if unit == "turns" else f"API rounds / {'L of the session' if c.recall_l is None else f'{c.recall_l:g}'}"
        mark = "  <- chosen" if unit == c.recall_age and math.isfinite(q0.value) else ""
        lines.append(f"recall    {unit:<6} q0 = {_estimate(q0, '.3f')} (chance a message of age 0 is used later: DP_RECALL_Q0)")
        lines.append(f"                 tau = {_estimate(tau, '.2f')} {unit_scale}; R² pooled {_number(fit.r_squared, '.2f')},"
                     f" per session {_number(c.recall_session_r2[unit], '.2f')}{mark}")
    for unit, (fit, q0, tau) in c.recall_fits_strict.items():
        lines.append(f"strict    {unit:<6} q0 = {_estimate(q0, '.3f')}, tau = {_estimate(tau, '.2f')}; R² pooled"
                     f" {_number(fit.r_squared, '.2f')}, per session {_number(c.recall_session_r2_strict[unit], '.2f')}"
                     " (strict detector: paths, identifiers and commands named again also count; `calibrate --env --detector strict` exports it)")
    lines.append("per session:")
    lines.append(f"  {'file':<40} {'family':<9} {'turns':>5} {'calls':>5} {'V':>7} {'L':>6} {'avg':>8} {'ratio':>6}")
    for s in c.sessions:
        lines.append(f"  {Path(s.path).name[:40]:<40} {s.family:<9} {s.user_turns:>5} {s.llm_calls:>5} {_number(s.v_tokens, ',.0f'):>7}"
                     f" {_number(s.calls_per_turn, '.1f'):>6} {_number(s.avg_tokens, ',.0f'):>8} {_number(s.token_ratio, '.3f'):>6}")
    lines += [f"skipped   {entry}" for entry in c.skipped]  # "path: reason", as replay lists them
    return "\n".join(lines)
