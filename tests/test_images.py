"""Image blocks (dp_compact.measure.images): their size read from the header, priced by the provider,
and never scaled by the token ratio (which is for text)."""

from __future__ import annotations

import base64
import json
import math
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from dp_compact.measure import tokens
from dp_compact.api import session_tokens
from dp_compact.measure.images import Image, find_images, image_size, image_tokens
from dp_compact.sessions import read_session
from dp_compact.conversation import Message
from dp_compact.settings import load_settings


def make_png(width: int, height: int) -> bytes:
    """A valid RGB PNG of that size, all black (signature, IHDR, one IDAT, IEND)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + b"\x00" * 3 * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def make_jpeg_header(width: int, height: int) -> bytes:
    """SOI, a JFIF APP0 segment and a baseline SOF0 segment: what the size reader needs of a JPEG."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_png_and_jpeg_sizes_are_read_from_their_headers() -> None:
    assert image_size(make_png(120, 45)) == (120, 45)
    assert image_size(make_jpeg_header(640, 480)) == (640, 480)
    assert image_size(b"\x89PNG\r\n\x1a\n") is None


def test_each_provider_shape_gives_the_image_size() -> None:
    png = make_png(30, 20)
    raw = {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}},  # Anthropic
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(png), "detail": "low"}},  # OpenAI Chat
        {"type": "input_image", "image_url": "data:image/jpeg;base64," + _b64(make_jpeg_header(800, 600))},  # Responses
        {"parts": [{"inlineData": {"mimeType": "image/png", "data": _b64(png)}}]},  # Gemini
        {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}},  # size unknown
    ]}
    assert find_images(raw) == [Image(30, 20), Image(30, 20, "low"), Image(800, 600), Image(30, 20), Image(0, 0)]


def test_provider_prices_by_hand() -> None:
    # Anthropic: ceil(w·h / 750), an image over 1568 px scaled down, at most 1,600
    assert image_tokens(Image(30, 20), "anthropic", 1600) == 1  # 600 / 750 -> 1
    assert image_tokens(Image(1000, 750), "anthropic", 1600) == 1000
    assert image_tokens(Image(3000, 100), "anthropic", 1600) == math.ceil(1568 * (100 * 1568 / 3000) / 750)  # 110
    # OpenAI: 2048 x 4096 -> 1024 x 2048 -> 768 x 1536: 2 x 3 tiles of 512 px
    assert image_tokens(Image(2048, 4096), "openai", 1600) == 85 + 170 * 6
    assert image_tokens(Image(2048, 4096, "low"), "openai", 1600) == 85
    # Gemini: both sides at most 384 px: 258; else 768 px tiles
    assert image_tokens(Image(384, 300), "google", 1600) == 258
    assert image_tokens(Image(1600, 700), "google", 1600) == 258 * 3


def test_tiny_png_in_an_anthropic_message_costs_its_pixels_not_the_flat_cost(tmp_path: Path) -> None:
    png = make_png(150, 100)  # 15,000 px / 750 = 20 tokens
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}}
    path = tmp_path / "s.jsonl"
    lines = [{"role": "user", "content": [block, {"type": "text", "text": "What is in the picture?"}]},
             {"role": "assistant", "content": "A black rectangle."}]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    message = read_session(path).messages[0]
    text = int(tokens.count_text_tokens(["What is in the picture?"])[0])
    assert message.images == 1
    assert tokens.image_token_counts([message]).tolist() == [20]
    assert int(tokens.count_message_tokens([message])[0]) == text + tokens.MESSAGE_OVERHEAD_TOKENS + 20


def test_image_the_raw_does_not_hold_keeps_the_flat_cost() -> None:
    message = Message("user", "see attached", images=2, raw={"role": "user", "content": "see attached"})
    assert tokens.image_token_counts([message]).tolist() == [2 * tokens.IMAGE_TOKENS]


def test_token_ratio_scales_the_text_and_leaves_image_tokens_alone(tmp_path: Path) -> None:
    png = make_png(300, 250)  # 75,000 px / 750 = 100 tokens
    question = "Describe the chart in detail, please."
    path = tmp_path / "s.jsonl"
    lines = [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}},
                                          {"type": "text", "text": question}]},
             {"role": "assistant", "content": "It is black."}]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    session = read_session(path)
    scaled = session_tokens(session, load_settings(token_ratio=2.0), use_cache=False)
    text = int(tokens.count_text_tokens([question])[0]) + tokens.MESSAGE_OVERHEAD_TOKENS
    assert int(scaled[0]) == 2 * text + 100
    assert np.array_equal(scaled[1:], 2 * tokens.count_message_tokens(session.messages[1:]))


def test_openai_session_prices_its_images_by_tiles(tmp_path: Path) -> None:
    png = make_png(600, 600)  # 600 x 600: 2 x 2 tiles of 512 px
    path = tmp_path / "s.json"
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "what is this"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(png)}}]},
                {"role": "assistant", "content": "black"}]
    path.write_text(json.dumps({"model": "gpt-4o", "messages": messages}, indent=1), encoding="utf-8")
    session = read_session(path)
    family = tokens.provider_family(session.model, session.format)
    if family != "openai":
        pytest.skip(f"the reader did not keep the model ({session.model!r})")
    assert tokens.image_token_counts(session.messages, family).tolist() == [85 + 170 * 4, 0]


def test_measured_token_ratio_takes_the_images_off_both_growths(tmp_path: Path) -> None:
    from dp_compact.measure.estimation import measured_token_ratio

    png = make_png(1000, 750)  # 1,000 tokens on Anthropic's rule
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}}
    first = [{"role": "user", "content": "start"},
             {"role": "assistant", "content": "ok", "usage": {"input_tokens": 1000, "output_tokens": 1}},
             {"role": "user", "content": [block, {"type": "text", "text": "word " * 3000}]}]
    messages = read_session(_jsonl(tmp_path, first + [{"role": "assistant", "content": "x"}])).messages
    counts = tokens.count_message_tokens(messages)
    images = tokens.image_token_counts(messages)
    assert images.tolist() == [0, 0, 1000, 0]
    text_growth = int(counts[1] + counts[2]) - 1000
    second = {"role": "assistant", "content": "x", "usage": {"input_tokens": 1000 + 2 * text_growth + 1000, "output_tokens": 1}}
    session = read_session(_jsonl(tmp_path, first + [second]))
    assert measured_token_ratio(session, counts, images) == pytest.approx(2.0)
    assert measured_token_ratio(session, counts) < 2.0  # the images taken as text make the ratio look lower


def _jsonl(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    return path
