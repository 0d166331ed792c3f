"""Token counts (DESIGN §4): offline cl100k, bytes4, images, the persistent cache."""

from __future__ import annotations

import numpy as np

from dp_compact.measure import tokens
from dp_compact.conversation import Message, ToolCall, ToolResult


def test_count_text_tokens_uses_cl100k_offline():
    # "hello world" is 2 tokens in cl100k_base; Chinese costs about one token per character.
    assert tokens.count_text_tokens(["hello world"]).tolist() == [2]
    cjk = tokens.count_text_tokens(["压缩上下文窗口的成本模型"])[0]
    assert 8 <= cjk <= 16


def test_count_text_tokens_treats_special_tokens_as_text():
    assert tokens.count_text_tokens(["<|endoftext|>"])[0] > 1


def test_message_tokens_include_calls_results_and_overhead():
    plain = Message("assistant", "ok")
    with_call = Message("assistant", "ok", tool_calls=(ToolCall("c1", "Read", '{"file_path": "/src/app.py"}'),))
    result = Message("tool", tool_results=(ToolResult("c1", "line one\nline two"),))
    counts = tokens.count_message_tokens([plain, with_call, result])
    assert counts[0] == 1 + tokens.MESSAGE_OVERHEAD_TOKENS
    assert counts[1] > counts[0] + 5
    assert counts[2] == tokens.count_text_tokens(["line one\nline two"])[0] + tokens.MESSAGE_OVERHEAD_TOKENS


def test_images_cost_a_flat_amount_not_their_base64_length():
    small = Message("user", "look", images=1)
    counts = tokens.count_message_tokens([small, Message("user", "look")])
    assert counts[0] - counts[1] == tokens.IMAGE_TOKENS


def test_bytes4_is_ceil_bytes_over_four_plus_one_per_line():
    messages = [Message("user", "x", source_bytes=9, source_lines=1), Message("user", "y", source_bytes=8, source_lines=1),
                Message("assistant", "z", source_bytes=10, source_lines=3)]
    assert tokens.count_message_tokens(messages, tokenizer="bytes4").tolist() == [4, 3, 6]


def test_unknown_tokenizer_is_an_error():
    try:
        tokens.count_message_tokens([Message("user", "x")], tokenizer="chars")
    except ValueError as exc:
        assert "chars" in str(exc)
    else:
        raise AssertionError("no error")


def test_token_cache_gives_same_counts_and_skips_known_texts(tmp_path, monkeypatch):
    messages = [Message("user", f"message number {i} " * (i + 1)) for i in range(20)]
    cache = tokens.TokenCache(tmp_path / "t.sqlite")
    first = tokens.count_message_tokens(messages, cache=cache)
    assert np.array_equal(first, tokens.count_message_tokens(messages))
    counted: list[int] = []
    original = tokens.count_text_tokens
    monkeypatch.setattr(tokens, "count_text_tokens", lambda texts: counted.append(len(texts)) or original(texts))
    grown = messages + [Message("assistant", "a new answer"), Message("user", "and a new question")]
    second = tokens.count_message_tokens(grown, cache=cache)
    cache.close()
    assert counted == [2]  # only the two new messages were tokenized
    assert np.array_equal(second[:20], first)


def test_token_cache_on_unusable_path_still_counts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = tokens.TokenCache(blocker / "sub" / "t.sqlite")
    assert tokens.count_message_tokens([Message("user", "hello world")], cache=cache).tolist() == [2 + tokens.MESSAGE_OVERHEAD_TOKENS]
    cache.close()


def test_default_cache_path_is_under_user_cache_dir(tmp_path):
    assert str(tokens.default_cache_path()).startswith(str(tmp_path / "cache"))


def test_only_the_newest_copies_of_the_ranks_stay_in_the_cache_folder(tmp_path):
    """Each install writes its own copy of the ranks (1.3 MB): writing one removes all but the
    RANKS_COPIES_KEPT newest, the one just written always among them, and leaves other files alone."""
    import os

    copies = [tmp_path / f"cl100k_ranks.1.{i}.pickle" for i in range(7)]
    for age, path in enumerate(copies):
        path.write_bytes(b"x")
        os.utime(path, ns=(10**18 - age * 10**9, 10**18 - age * 10**9))  # copies[0] the newest
    other = tmp_path / "tokens.sqlite"
    other.write_bytes(b"db")
    current = copies[-1]  # just written, though its time says otherwise
    tokens._drop_old_ranks(current)
    left = sorted(p.name for p in tmp_path.glob("cl100k_ranks.*.pickle"))
    assert left == sorted(p.name for p in [*copies[: tokens.RANKS_COPIES_KEPT - 1], current])
    assert other.exists()
