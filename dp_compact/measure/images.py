"""Images sent inside messages: their pixel size, read from the file header, and what a provider charges.

A provider does not bill an image by its base64 length but by its size in pixels, each by its
own rule (:func:`image_tokens`). The size is read from the header of the encoded image (PNG
``IHDR``, JPEG ``SOF``, GIF and WebP headers) without decoding the picture; an image given by
URL or file id, or in a format not read here, has no known size and is charged the flat
:data:`~dp_compact.measure.tokens.IMAGE_TOKENS`.

Shapes recognised (a block is a dict at any depth of the message, tool results included):

- Anthropic ``{"type": "image", "source": {"type": "base64", "data": ...}}``;
- OpenAI Chat ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,...", "detail": ...}}``
  and Responses ``{"type": "input_image", "image_url": "data:...", "detail": ...}``;
- Gemini ``{"inlineData": {"mimeType": "image/png", "data": ...}}`` (or ``inline_data``).

Nothing here raises on a broken image: it is an :class:`Image` of unknown size.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

#: What the JSON text of every image block :func:`find_images` recognises holds (its ``type``
#: value or its inline-data key, quoted): a message without any holds no image.
IMAGE_MARKERS = re.compile(rb'"(?:image|image_url|input_image|inlineData|inline_data)"')

__all__ = [
    "IMAGE_MARKERS",
    "decode_base64",
    "find_blocks",
    "ANTHROPIC_MAX_EDGE_PX",
    "ANTHROPIC_MAX_TOKENS",
    "ANTHROPIC_PIXELS_PER_TOKEN",
    "GEMINI_TILE_PX",
    "GEMINI_TILE_TOKENS",
    "OPENAI_BASE_TOKENS",
    "OPENAI_TILE_TOKENS",
    "Image",
    "find_images",
    "image_size",
    "image_tokens",
]

#: Anthropic vision guide ("Evaluate image size"): tokens ≈ width·height / 750 ...
ANTHROPIC_PIXELS_PER_TOKEN = 750
#: ... an image whose long edge exceeds 1568 px is scaled down to it first ...
ANTHROPIC_MAX_EDGE_PX = 1568
#: ... and one of more than about 1,600 tokens is scaled down to that size (1092 x 1092 px).
ANTHROPIC_MAX_TOKENS = 1600
#: OpenAI vision guide ("Calculating costs", GPT-4o family): a low-detail image costs the base
#: 85 tokens; a high-detail one is fitted in 2048 x 2048 px, scaled so its short side is at
#: most 768 px, and costs the base plus 170 tokens per 512 px tile.
OPENAI_BASE_TOKENS = 85
OPENAI_TILE_TOKENS = 170
_OPENAI_FIT_PX, _OPENAI_SHORT_PX, _OPENAI_TILE_PX = 2048, 768, 512
#: Gemini image understanding guide: an image with both sides at most 384 px costs 258 tokens;
#: a larger one is cut into 768 x 768 px tiles of 258 tokens each.
GEMINI_TILE_TOKENS = 258
GEMINI_TILE_PX = 768
_GEMINI_SMALL_PX = 384

_PNG = b"\x89PNG\r\n\x1a\n"
#: JPEG start-of-frame markers (SOF0-SOF15 but DHT, JPG and DAC), which hold the size.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: Base64 characters decoded first: enough for a PNG, GIF or WebP header (a JPEG may need more).
_HEAD_CHARS = 64


@dataclass(frozen=True, slots=True)
class Image:
    """One image block of a message.

    Attributes
    ----------
    width, height : int
        Its size in pixels; 0 when unknown (given by URL, or a format not read here).
    detail : str
        OpenAI's ``detail`` (``"low"``, ``"high"``, ``"auto"``) when the block gives it, else ``""``.
    """

    width: int = 0
    height: int = 0
    detail: str = ""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the first start-of-frame segment of a JPEG, or None."""
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # segments without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels read from the header of a PNG, JPEG, GIF or WebP image; None otherwise.

    >>> import struct, zlib
    >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 300, 200, 8, 2, 0, 0, 0)
    >>> image_size(png), image_size(b"GIF89a\\x10\\x00\\x20\\x00"), image_size(b"not an image")
    ((300, 200), (16, 32), None)
    """
    if data.startswith(_PNG) and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return width & 0x3FFF, height & 0x3FFF
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def decode_base64(data: Any, chars: int | None = None) -> bytes:
    """Bytes of (the first ``chars`` characters of) a base64 payload, bare or in a ``data:`` URL;
    ``b""`` when it is not a string or does not decode."""
    if not isinstance(data, str):
        return b""
    payload = data.partition(",")[2] if data.startswith("data:") else data
    if chars is not None:
        payload = payload[: chars - chars % 4]
    try:
        return base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _may_hold(raw: Any, markers: re.Pattern[bytes]) -> bool:
    """False when ``raw``'s compact JSON text holds none of ``markers`` (so no block can match);
    True when it does or ``raw`` is not JSON-serialisable."""
    try:
        return markers.search(orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS)) is not None
    except TypeError:
        return True


def find_blocks(raw: Any, recognise: Callable[[dict[str, Any]], T | None], markers: re.Pattern[bytes] | None = None) -> list[T]:
    """What ``recognise`` finds in the content blocks of ``raw`` (a message as its source wrote it:
    dicts and lists of any API shape), in order of appearance, at any depth; a recognised block
    is not searched further.

    ``markers``, when given, is a pattern that every block ``recognise`` accepts shows in its
    JSON text (a ``"type"`` value or a key, quoted): ``raw`` without any is not walked. ``raw``
    given as JSON text (bytes, :class:`~dp_compact.conversation.RawJSON`) is parsed first. One C
    serialisation and search costs far less than walking every dict of a message in Python.

    >>> find_blocks({"content": [{"n": 1}, {"x": {"n": 2}}]}, lambda b: b.get("n"))
    [1, 2]
    >>> find_blocks({"content": [{"n": 1}]}, lambda b: b.get("n"), re.compile(rb'"m"'))
    []
    """
    if isinstance(raw, bytes):  # a message's JSON text (conversation.RawJSON): searched before it is parsed
        if markers is not None and markers.search(raw) is None:
            return []
        raw = orjson.loads(memoryview(raw))
    elif markers is not None and isinstance(raw, (dict, list)) and not _may_hold(raw, markers):
        return []
    found: list[T] = []
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, dict):
            item = recognise(value)
            if item is not None:
                found.append(item)
            else:
                stack.extend(reversed([v for v in value.values() if isinstance(v, (list, dict))]))
    return found


def _size_of(payload: Any) -> tuple[int, int]:
    """Size of a base64 image payload (0, 0 when unknown); only a JPEG is decoded whole."""
    if not isinstance(payload, str) or not payload:
        return 0, 0
    head = decode_base64(payload, _HEAD_CHARS)
    size = image_size(head)
    if size is None and head.startswith(b"\xff\xd8"):
        size = image_size(decode_base64(payload))
    return size if size is not None and size[0] > 0 and size[1] > 0 else (0, 0)


def _image_of(block: dict[str, Any]) -> Image | None:
    """The image ``block`` holds, if it is one of the shapes of the module docstring."""
    kind = block.get("type")
    if kind == "image":
        source = block.get("source")
        base64_data = source.get("data") if isinstance(source, dict) and source.get("type") == "base64" else None
        return Image(*_size_of(base64_data))
    if kind in ("image_url", "input_image"):
        holder = block.get("image_url")
        url = holder.get("url") if isinstance(holder, dict) else holder
        detail = block.get("detail", holder.get("detail") if isinstance(holder, dict) else None)
        data = url if isinstance(url, str) and url.startswith("data:") else None
        return Image(*_size_of(data), detail=detail if isinstance(detail, str) else "")
    inline = block.get("inlineData", block.get("inline_data"))
    if isinstance(inline, dict) and str(inline.get("mimeType") or inline.get("mime_type") or "").startswith("image/"):
        return Image(*_size_of(inline.get("data")))
    return None


def find_images(raw: Any) -> list[Image]:
    """The image blocks of a message as its source wrote it, in order, at any depth.

    Parameters
    ----------
    raw : Any
        ``Message.raw``: a dict or list of any API shape (None gives no images).

    Returns
    -------
    list of Image
        One per image block; an image block is not searched further.
    """
    return find_blocks(raw, _image_of, IMAGE_MARKERS)


def _anthropic(width: int, height: int) -> int:
    scale = min(1.0, ANTHROPIC_MAX_EDGE_PX / max(width, height))
    return min(ANTHROPIC_MAX_TOKENS, math.ceil(width * scale * height * scale / ANTHROPIC_PIXELS_PER_TOKEN))


def _openai(width: int, height: int, detail: str) -> int:
    if detail == "low":
        return OPENAI_BASE_TOKENS
    fit = min(1.0, _OPENAI_FIT_PX / max(width, height))
    width, height = width * fit, height * fit
    short = min(1.0, _OPENAI_SHORT_PX / min(width, height))
    tiles = math.ceil(width * short / _OPENAI_TILE_PX) * math.ceil(height * short / _OPENAI_TILE_PX)
    return OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * tiles


def _gemini(width: int, height: int) -> int:
    if width <= _GEMINI_SMALL_PX and height <= _GEMINI_SMALL_PX:
        return GEMINI_TILE_TOKENS
    return GEMINI_TILE_TOKENS * math.ceil(width / GEMINI_TILE_PX) * math.ceil(height / GEMINI_TILE_PX)


def image_tokens(image: Image, family: str, unknown: int) -> int:
    """What ``family``'s provider charges for ``image``, in its own tokens.

    Parameters
    ----------
    image : Image
    family : str
        :func:`~dp_compact.measure.tokens.provider_family`: ``"openai"`` (tiles), ``"google"`` (258-token
        tiles), anything else Anthropic's rule (width·height / 750 after scaling, at most 1,600).
    unknown : int
        Tokens of an image of unknown size (the flat cost), and of a low-detail one for no provider
        but OpenAI.

    Returns
    -------
    int
        Tokens (constants and their sources: module attributes).

    >>> image_tokens(Image(200, 200), "anthropic", 1600), image_tokens(Image(4000, 3000), "anthropic", 1600)
    (54, 1600)
    >>> image_tokens(Image(1024, 1024), "openai", 1600), image_tokens(Image(1024, 1024, "low"), "openai", 1600)
    (765, 85)
    >>> image_tokens(Image(1000, 500), "google", 1600), image_tokens(Image(0, 0), "openai", 1600)
    (516, 1600)
    """
    if image.width <= 0 or image.height <= 0:
        return OPENAI_BASE_TOKENS if family == "openai" and image.detail == "low" else unknown
    if family == "openai":
        return _openai(image.width, image.height, image.detail)
    if family == "google":
        return _gemini(image.width, image.height)
    return _anthropic(image.width, image.height)
