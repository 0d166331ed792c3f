"""Usage records as the readers take them: both conventions, and bad counts as file:line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import MalformedLineError
from dp_compact.sessions import read_session
from dp_compact.sessions.usage import token_count, usage_from_api

runner = CliRunner()


def test_usage_from_api_anthropic_adds_cache_reads_and_writes():
    usage = usage_from_api({"input_tokens": 12, "cache_read_input_tokens": 90_000, "cache_creation_input_tokens": 800,
                            "output_tokens": 300}, line=7)
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (90_812, 90_000, 800, 300)
    assert (usage.line, usage.convention) == (7, "anthropic")


@pytest.mark.parametrize("obj", [
    {"input_tokens": 50_000, "cached_input_tokens": 45_000, "output_tokens": 10},  # Codex token_count
    {"input_tokens": 50_000, "input_tokens_details": {"cached_tokens": 45_000}, "output_tokens": 10},  # Responses API
    {"prompt_tokens": 50_000, "prompt_tokens_details": {"cached_tokens": 45_000}, "completion_tokens": 10},  # Chat Completions
])
def test_usage_from_api_openai_input_already_includes_the_cached_part(obj):
    usage = usage_from_api(obj)
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.output_tokens, usage.convention) == (50_000, 45_000, 10, "openai")


def test_usage_from_api_cached_above_input_means_input_excludes_it():
    usage = usage_from_api({"input_tokens": 40, "cached_input_tokens": 60_000})
    assert (usage.prompt_tokens, usage.convention) == (60_040, "anthropic")


def test_usage_from_api_both_key_families_are_not_double_counted():
    # a translation layer that writes the cached count under both names, input including it
    both = usage_from_api({"input_tokens": 50_000, "cached_input_tokens": 45_000, "cache_read_input_tokens": 45_000})
    assert (both.prompt_tokens, both.convention) == (50_000, "openai")
    # the names disagree: Anthropic's sum
    apart = usage_from_api({"input_tokens": 500, "cached_input_tokens": 0, "cache_read_input_tokens": 45_000})
    assert (apart.prompt_tokens, apart.convention) == (45_500, "anthropic")


def test_usage_from_api_zero_prompt_is_no_record():
    assert usage_from_api({"input_tokens": 0, "output_tokens": 0}) is None


@pytest.mark.parametrize("value", [-5, "abc", 12.5, True, {"n": 1}, [3], "-4"])
def test_token_count_rejects_what_is_not_a_whole_count(value: Any):
    with pytest.raises(ValueError, match="'input_tokens' must be a non-negative whole number"):
        token_count(value, "input_tokens")


def test_token_count_accepts_whole_numbers_in_any_json_spelling():
    assert [token_count(v, "x") for v in (0, 7, 7.0, "7", None)] == [0, 7, 7, 7, 0]


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _claude_code(usage: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s", "message": {"role": "user", "content": "hi"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
         "message": {"id": "m1", "role": "assistant", "model": "claude-sonnet-4", "content": [{"type": "text", "text": "hello"}],
                     "usage": usage}},
    ]


def _codex(usage: dict[str, Any]) -> list[dict[str, Any]]:
    def env(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "t", "type": kind, "payload": payload}

    return [
        env("session_meta", {"id": "x"}),
        env("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
        env("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yo"}]}),
        env("event_msg", {"type": "token_count", "info": {"last_token_usage": usage, "total_token_usage": usage}}),
    ]


BAD_USAGE = [
    ({"input_tokens": "abc", "output_tokens": 1}, "input_tokens"),
    ({"input_tokens": -5, "cache_read_input_tokens": 100}, "input_tokens"),
    ({"input_tokens": {"x": 1}}, "input_tokens"),
    ({"input_tokens": 100, "cache_read_input_tokens": -4}, "cache_read_input_tokens"),
]


@pytest.mark.parametrize(("usage", "field"), BAD_USAGE)
def test_claude_code_bad_usage_count_names_file_line_and_field(tmp_path, usage, field):
    path = _write(tmp_path, _claude_code(usage))
    with pytest.raises(MalformedLineError, match=f"s.jsonl:2: usage field '{field}'") as caught:
        read_session(path)
    assert caught.value.line == 2


@pytest.mark.parametrize(("usage", "field"), [({"input_tokens": {"a": 1}}, "input_tokens"), ({"input_tokens": 100, "cached_input_tokens": -4}, "cached_input_tokens")])
def test_codex_bad_usage_count_names_file_line_and_field(tmp_path, usage, field):
    path = _write(tmp_path, _codex(usage))
    with pytest.raises(MalformedLineError, match=f"s.jsonl:4: usage field '{field}'"):
        read_session(path)


def test_bad_usage_count_is_a_one_line_cli_error_not_a_traceback(tmp_path):
    path = _write(tmp_path, _claude_code({"input_tokens": [3]}))
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and f"{path}:2: usage field 'input_tokens'" in result.output


def test_bad_usage_line_is_skipped_with_lenient(tmp_path):
    session = read_session(_write(tmp_path, _claude_code({"input_tokens": -1})), lenient=True)
    assert session.usage == () and session.skipped_lines == 1


def test_claude_code_openai_style_usage_through_a_proxy_is_not_double_counted(tmp_path):
    session = read_session(_write(tmp_path, _claude_code({"input_tokens": 50_000, "cached_input_tokens": 45_000, "output_tokens": 9})))
    assert (session.usage[0].prompt_tokens, session.usage[0].convention) == (50_000, "openai")


def _anthropic(usage: dict[str, Any], key: str = "usage") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}], key: usage},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "bye", "usage": {"input_tokens": 10, "cache_read_input_tokens": 1_000, "output_tokens": 3}},
    ]


@pytest.mark.parametrize(("usage", "field"), [
    *BAD_USAGE,
    ({"input_tokens": [3]}, "input_tokens"),
    ({"input_tokens": 100, "output_tokens": "many"}, "output_tokens"),
    ({"input_tokens": 100, "cache_creation_input_tokens": -1}, "cache_creation_input_tokens"),
])
def test_anthropic_bad_usage_count_names_file_line_and_field(tmp_path, usage, field):
    path = _write(tmp_path, _anthropic(usage))
    with pytest.raises(MalformedLineError, match=f"s.jsonl:2: usage field '{field}'") as caught:
        read_session(path)
    assert (caught.value.path, caught.value.line) == (str(path), 2)


@pytest.mark.parametrize("tokens", [{"prompt": "lots", "completion": 2}, {"prompt": 100, "cached": -20}, {"prompt": [1]}])
def test_anthropic_cline_bad_metrics_tokens_name_file_line_and_field(tmp_path, tokens):
    path = _write(tmp_path, _anthropic({"tokens": tokens}, key="metrics"))
    with pytest.raises(MalformedLineError, match=r"s\.jsonl:2: usage field 'metrics\.tokens\.(prompt|cached)'"):
        read_session(path)


def test_anthropic_bad_usage_in_a_json_array_names_the_message(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_anthropic({"input_tokens": -5}), indent=1))
    with pytest.raises(MalformedLineError, match=r"s\.json: message 1: usage field 'input_tokens'"):
        read_session(path)


def test_anthropic_bad_usage_with_lenient_drops_the_usage_and_counts_the_line(tmp_path):
    session = read_session(_write(tmp_path, _anthropic({"input_tokens": "abc"})), lenient=True)
    assert session.skipped_lines == 1
    assert [u.line for u in session.usage] == [4] and session.usage[0].prompt_tokens == 1_010
    assert len(session.messages) == 4  # the message itself is kept, as the Claude Code reader does


def test_anthropic_usage_is_read_by_the_shared_helper(tmp_path):
    session = read_session(_write(tmp_path, _anthropic({"input_tokens": "12", "cache_creation_input_tokens": 800.0,
                                                        "cache_read_input_tokens": 90_000, "output_tokens": 30})))
    first = session.usage[0]
    assert (first.prompt_tokens, first.cache_read_tokens, first.cache_write_tokens, first.output_tokens) == (90_812, 90_000, 800, 30)
    assert (first.line, first.convention) == (2, "anthropic")


def test_anthropic_bad_usage_is_a_one_line_cli_error_and_lenient_warns(tmp_path):
    path = _write(tmp_path, _anthropic({"input_tokens": {"n": 1}}))
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 2
    assert result.stderr == f"dp-compact: {path}:2: usage field 'input_tokens' must be a non-negative whole number of tokens, not {{'n': 1}}\n"
    result = runner.invoke(app, ["plan", str(path), "--json", "--lenient"])
    assert result.exit_code == 0 and "skipped 1 malformed line" in result.stderr
