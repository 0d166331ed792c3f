"""Documents sent inside messages: PDF and plain-text document blocks, and the pages of a PDF.

The session readers count a document block as one binary block (``Message.images``), as they
count an image. A provider does not bill a document so: Anthropic's PDF support guide says
that each page of a PDF is sent as the text extracted from it *and* as an image of the page,
and a plain-text document is its text. :func:`find_documents` finds the documents in a
message as the source wrote it (``Message.raw``), and :func:`pdf_pages` reads a PDF's pages
(text and size) with pypdf; :mod:`dp_compact.measure.tokens` turns them into tokens.

Shapes recognised (a block is a dict at any depth of the message, tool results included):

- Anthropic ``{"type": "document", "source": {"type": "base64", "media_type":
  "application/pdf", "data": ...}}``; ``source.type`` ``"text"`` (its ``data``) and
  ``"content"`` (its text blocks) are plain-text documents;
- OpenAI Chat ``{"type": "file", "file": {"file_data": "data:application/pdf;base64,..."}}`` and
  Responses ``{"type": "input_file", "file_data": "data:application/pdf;base64,..."}``;
- Gemini ``{"inlineData": {"mimeType": "application/pdf", "data": ...}}`` (or ``inline_data``).

A document given by reference has no bytes here and cannot be fetched (no network): Anthropic
``source.type`` ``"url"`` (its ``url``) or ``"file"`` (its ``file_id``), OpenAI Chat
``{"type": "file", "file": {"file_id": ...}}``, Responses ``input_file`` with ``file_id`` or
``file_url``, Gemini ``fileData`` with a PDF ``mimeType``. It is a :class:`Document` whose
``reference`` names it, and its size is estimated (:func:`dp_compact.measure.tokens.document_tokens`).
Nothing here raises on a broken document: an undecodable PDF is a :class:`Document` with no
bytes, a PDF pypdf cannot open gives None from :func:`pdf_pages`, a page whose text cannot be
extracted has ``text=None``; the token count then falls back to the provider's per-page estimate.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dp_compact.measure.images import decode_base64, find_blocks

__all__ = ["DOCUMENT_MARKERS", "PDF_MEDIA_TYPE", "Document", "PdfPage", "count_pdf_pages", "find_documents", "pdf_pages"]

PDF_MEDIA_TYPE = "application/pdf"
TEXT_MEDIA_TYPE = "text/plain"
_DATA_URL_PDF = "data:application/pdf;base64,"
#: A page object's dictionary in raw PDF bytes (not ``/Pages``), to count pages pypdf cannot read.
_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
#: What the JSON text of every document block :func:`find_documents` recognises holds (its
#: ``type`` value or its inline or uploaded data key, quoted): a message without any holds none.
DOCUMENT_MARKERS = re.compile(rb'"(?:document|file|input_file|inlineData|inline_data|fileData|file_data)"')


@dataclass(frozen=True, slots=True)
class Document:
    """One document block of a message.

    Attributes
    ----------
    media_type : str
        ``"application/pdf"`` or ``"text/plain"``.
    data : bytes
        The PDF's bytes (decoded from base64); ``b""`` for a text document or a PDF whose
        base64 does not decode.
    text : str
        A text document's text; ``""`` for a PDF.
    reference : str
        The URL or file id of a document given by reference (its bytes are not in the
        session); ``""`` for a document given inline.
    """

    media_type: str
    data: bytes = b""
    text: str = ""
    reference: str = ""


@dataclass(frozen=True, slots=True)
class PdfPage:
    """One page of a PDF.

    Attributes
    ----------
    text : str or None
        The text extracted from the page (``""`` for a page without a text layer, such as a
        scan); None when extraction failed.
    width_pt, height_pt : float
        The page's MediaBox in PDF points (1/72 inch); 0 when unknown.
    """

    text: str | None
    width_pt: float = 0.0
    height_pt: float = 0.0


def _content_text(content: Any) -> str:
    """Text of an Anthropic ``content`` document source: strings and ``text`` blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [b if isinstance(b, str) else b.get("text") for b in content if isinstance(b, (str, dict))]
    return "\n".join(p for p in parts if isinstance(p, str))


def _document_of(block: dict[str, Any]) -> Document | None:
    """The document ``block`` holds, if it is one of the shapes of the module docstring."""
    kind = block.get("type")
    source = block.get("source")
    if kind == "document" and isinstance(source, dict):
        if source.get("type") == "base64" and source.get("media_type") == PDF_MEDIA_TYPE:
            return Document(PDF_MEDIA_TYPE, decode_base64(source.get("data")))
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            return Document(TEXT_MEDIA_TYPE, text=source["data"])
        if source.get("type") == "content":
            return Document(TEXT_MEDIA_TYPE, text=_content_text(source.get("content")))
        reference = source.get("url") if source.get("type") == "url" else source.get("file_id") if source.get("type") == "file" else None
        return Document(PDF_MEDIA_TYPE, reference=reference) if isinstance(reference, str) and reference else None
    holder = block.get("file") if kind == "file" and isinstance(block.get("file"), dict) else block
    if kind in ("file", "input_file") and str(holder.get("file_data", "")).startswith(_DATA_URL_PDF):
        return Document(PDF_MEDIA_TYPE, decode_base64(holder["file_data"]))
    if kind in ("file", "input_file") and not holder.get("file_data"):
        reference = holder.get("file_id") or holder.get("file_url")
        if isinstance(reference, str) and reference:
            return Document(PDF_MEDIA_TYPE, reference=reference)
    inline = block.get("inlineData", block.get("inline_data"))
    if isinstance(inline, dict) and (inline.get("mimeType") or inline.get("mime_type")) == PDF_MEDIA_TYPE:
        return Document(PDF_MEDIA_TYPE, decode_base64(inline.get("data")))
    uploaded = block.get("fileData", block.get("file_data"))
    if isinstance(uploaded, dict) and (uploaded.get("mimeType") or uploaded.get("mime_type")) == PDF_MEDIA_TYPE:
        reference = uploaded.get("fileUri") or uploaded.get("file_uri")
        return Document(PDF_MEDIA_TYPE, reference=reference) if isinstance(reference, str) and reference else None
    return None


def find_documents(raw: Any) -> list[Document]:
    """The PDF and plain-text documents in a message as its source wrote it.

    Parameters
    ----------
    raw : Any
        ``Message.raw``: a dict or list of any API shape (None gives no documents).

    Returns
    -------
    list of Document
        In order of appearance, at any depth (tool-result contents included); a document
        block is not searched further.

    >>> find_documents({"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "hi"}}]})
    [Document(media_type='text/plain', data=b'', text='hi', reference='')]
    """
    return find_blocks(raw, _document_of, DOCUMENT_MARKERS)


@contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """Silence pypdf's notes on non-compliant files (its logger and warnings) for an estimate."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _pdf_errors() -> tuple[type[BaseException], ...]:
    """What pypdf raises on a malformed file: its own errors and, from deep inside its parser,
    these built-in ones (found by feeding it truncated and corrupted files)."""
    from pypdf.errors import PyPdfError

    return (PyPdfError, ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError,
            RecursionError, OverflowError, ZeroDivisionError, zlib.error, EOFError)


def _page(page: Any, errors: tuple[type[BaseException], ...]) -> PdfPage:
    """Text and size of one pypdf page; ``text=None`` when extraction fails."""
    try:
        text: str | None = page.extract_text() or ""
    except errors:
        text = None
    try:
        box = page.mediabox
        width, height = abs(float(box.width)), abs(float(box.height))
    except errors:
        width = height = 0.0
    return PdfPage(text, width, height)


def pdf_pages(data: bytes) -> list[PdfPage] | None:
    """Every page of a PDF with its extracted text and size, read with pypdf.

    Parameters
    ----------
    data : bytes
        The PDF file.

    Returns
    -------
    list of PdfPage or None
        One per page, in order. None when the file cannot be opened or its pages cannot be
        listed (not a PDF, truncated, encrypted with a password); a page whose text cannot be
        extracted has ``text=None``.
    """
    if not data:
        return None
    from pypdf import PdfReader

    errors = _pdf_errors()
    with _quiet_pypdf():
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                return None
            pages = list(reader.pages)
        except errors:
            return None
        return [_page(page, errors) for page in pages]


def count_pdf_pages(data: bytes) -> int:
    """Pages of a PDF pypdf cannot read, counted by their ``/Type /Page`` objects in the raw bytes.

    At least 1 (a document block is at least one page). Pages inside compressed object
    streams are not seen, so this is a lower bound.

    >>> count_pdf_pages(b"<< /Type /Pages /Count 2 >> << /Type /Page >> << /Type/Page >>")
    2
    """
    return max(len(_PAGE_OBJECT.findall(data)), 1)
