"""Document blocks (dp_compact.measure.documents) and their tokens (tokens.document_tokens): a PDF counts by its pages."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest

from dp_compact.measure import tokens
from dp_compact.measure.documents import PDF_MEDIA_TYPE, Document, PdfPage, count_pdf_pages, find_documents, pdf_pages
from dp_compact.conversation import Message

LOREM = ("Section {n}. The provider shall keep the service available {n}9.5 percent of each month; "
         "service credits are the customer's sole remedy for missed availability, except as section 10 says. ")


def make_pdf(pages: list[str], *, size: tuple[int, int] = (595, 842), compress: bool = True) -> bytes:
    """A valid PDF 1.4 with one page per text (Helvetica, one line of text per 90 characters)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]  # 1, 2 (filled below)
    font = 3
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for text in pages:
        lines = [text[i : i + 90] for i in range(0, len(text), 90)] or [""]
        ops = ["BT /F1 10 Tf 40 800 Td 12 TL"]
        for line in lines:
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"({escaped}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        body = zlib.compress(stream) if compress else stream
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(body), flate) + body + b"\nendstream")
        content = len(objects)
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                       % (size[0], size[1], font, content))
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def anthropic_pdf_message(data: bytes, question: str = "What does section 3 say?") -> Message:
    """A user message with a base64 PDF document block, as the Anthropic reader keeps it."""
    block = {"type": "document", "source": {"type": "base64", "media_type": PDF_MEDIA_TYPE, "data": base64.b64encode(data).decode()}}
    raw = {"role": "user", "content": [block, {"type": "text", "text": question}]}
    return Message("user", question, images=1, raw=raw)


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test counts its PDFs itself (the per-process memo starts empty)."""
    monkeypatch.setattr(tokens, "_PDF_MEMO", {})


def test_pdf_pages_extracts_each_page_text_and_size():
    texts = [LOREM.format(n=n) * 3 for n in range(1, 4)]
    pages = pdf_pages(make_pdf(texts, size=(612, 792)))
    assert pages is not None and len(pages) == 3
    assert all(p.text and "service credits" in p.text for p in pages)
    assert "Section 2." in pages[1].text
    assert (pages[0].width_pt, pages[0].height_pt) == (612, 792)


def test_pdf_pages_reads_uncompressed_content_streams_too():
    pages = pdf_pages(make_pdf(["plain text page"], compress=False))
    assert pages is not None and pages[0].text is not None and "plain text page" in pages[0].text


def test_pdf_pages_of_garbage_is_none_and_raises_nothing():
    assert pdf_pages(b"%PDF-1.4\nthis is not really a pdf") is None
    assert pdf_pages(b"") is None


def test_count_pdf_pages_counts_page_objects_not_the_page_tree():
    assert count_pdf_pages(make_pdf(["a", "b", "c"], compress=False)) == 3
    assert count_pdf_pages(b"no pages here") == 1


def test_find_documents_recognises_each_provider_shape():
    pdf = make_pdf(["x"])
    url = "data:application/pdf;base64," + base64.b64encode(pdf).decode()
    raw = [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(pdf).decode()}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": url}},  # OpenAI Chat Completions
        {"type": "input_file", "file_data": url},  # OpenAI Responses
        {"parts": [{"inlineData": {"mimeType": "application/pdf", "data": base64.b64encode(pdf).decode()}}]},  # Gemini
        {"type": "tool_result", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}]},
        {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "chunk one"}, "chunk two"]}},
        {"type": "document", "source": {"type": "url", "url": "https://example.org/a.pdf"}},  # no bytes: a reference
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]
    found = find_documents({"role": "user", "content": raw})
    assert [d.media_type for d in found] == [PDF_MEDIA_TYPE] * 4 + ["text/plain"] * 2 + [PDF_MEDIA_TYPE]
    assert all(d.data == pdf for d in found[:4])
    assert found[4].text == "notes" and found[5].text == "chunk one\nchunk two"
    assert found[6] == Document(PDF_MEDIA_TYPE, reference="https://example.org/a.pdf")
    assert find_documents(None) == []


def test_find_documents_undecodable_base64_is_a_pdf_without_bytes():
    raw = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "@@@not base64@@@"}}
    assert find_documents(raw) == [Document(PDF_MEDIA_TYPE, b"")]


def test_page_image_tokens_follow_the_vision_formula_capped_at_image_tokens():
    assert tokens.page_image_tokens(595, 842) == tokens.IMAGE_TOKENS  # A4 at a 1568 px long edge: 2,318 > cap
    assert tokens.page_image_tokens(200, 1000) == 656  # a narrow page: 314 x 1568 px / 750, rounded up
    assert tokens.page_image_tokens(0, 0) == tokens.IMAGE_TOKENS


def test_pdf_document_counts_page_text_plus_one_image_per_page():
    texts = [LOREM.format(n=n) * 4 for n in range(1, 6)]
    data = make_pdf(texts)
    counted = tokens.document_tokens(Document(PDF_MEDIA_TYPE, data))
    extracted = sum(int(tokens.count_text_tokens([p.text])[0]) for p in pdf_pages(data))
    assert counted == extracted + 5 * tokens.IMAGE_TOKENS
    page_text = int(tokens.count_text_tokens(texts).sum())
    assert 0.9 * page_text <= extracted <= 1.25 * page_text  # the page text (broken into lines every 90 characters)


def test_pdf_page_without_text_layer_costs_its_image_only():
    data = make_pdf([""])
    assert tokens.document_tokens(Document(PDF_MEDIA_TYPE, data)) == tokens.IMAGE_TOKENS


def test_pdf_page_whose_text_cannot_be_extracted_costs_the_guide_estimate(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tokens, "pdf_pages", lambda data: [PdfPage(None, 595, 842), PdfPage("two words", 595, 842)])
    expected = tokens.PDF_TEXT_TOKENS_PER_PAGE + 2 * tokens.IMAGE_TOKENS + int(tokens.count_text_tokens(["two words"])[0])
    assert tokens.document_tokens(Document(PDF_MEDIA_TYPE, b"%PDF-1.4 stub")) == expected


def test_unreadable_pdf_costs_the_guide_estimate_per_page_it_shows():
    broken = b"%PDF-1.4\n1 0 obj << /Type /Page >> 2 0 obj << /Type /Page >> garbage"
    per_page = tokens.PDF_TEXT_TOKENS_PER_PAGE + tokens.IMAGE_TOKENS
    assert tokens.document_tokens(Document(PDF_MEDIA_TYPE, broken)) == 2 * per_page
    assert tokens.document_tokens(Document(PDF_MEDIA_TYPE, b"")) == per_page


def test_text_document_counts_its_text():
    assert tokens.document_tokens(Document("text/plain", text="hello world")) == 2
    assert tokens.document_tokens(Document("text/plain")) == 0


def test_message_with_pdf_counts_pages_instead_of_one_image():
    texts = [LOREM.format(n=n) * 4 for n in range(1, 9)]
    message = anthropic_pdf_message(make_pdf(texts))
    plain = Message("user", message.text)
    with_pdf, without = tokens.count_message_tokens([message, plain]).tolist()
    document = with_pdf - without
    assert document == tokens.document_tokens(find_documents(message.raw)[0])
    assert document >= 0.9 * int(tokens.count_text_tokens(texts).sum()) + 8 * tokens.IMAGE_TOKENS  # not one flat image
    assert document < len(base64.b64encode(make_pdf(texts))) * 10  # and not absurd


def test_message_images_beside_a_pdf_still_cost_the_flat_image_amount():
    message = anthropic_pdf_message(make_pdf(["one page"]))
    raw = {**message.raw, "content": [*message.raw["content"], {"type": "image", "source": {"type": "base64", "data": "AA=="}}]}
    both = Message("user", message.text, images=2, raw=raw)
    assert tokens.count_message_tokens([both])[0] - tokens.count_message_tokens([message])[0] == tokens.IMAGE_TOKENS


def test_pdf_tokens_come_from_the_persistent_cache_the_second_time(tmp_path, monkeypatch: pytest.MonkeyPatch):
    data = make_pdf([LOREM.format(n=7)])
    cache = tokens.TokenCache(tmp_path / "t.sqlite")
    first = tokens.document_tokens(Document(PDF_MEDIA_TYPE, data), cache)
    monkeypatch.setattr(tokens, "_PDF_MEMO", {})
    monkeypatch.setattr(tokens, "pdf_pages", lambda data: pytest.fail("the PDF was parsed again"))
    assert tokens.document_tokens(Document(PDF_MEDIA_TYPE, data), cache) == first
    cache.close()


def test_bytes4_counts_a_pdf_message_by_its_source_bytes():
    message = anthropic_pdf_message(make_pdf(["x"]))
    sized = Message("user", message.text, images=1, source_bytes=4000, raw=message.raw)
    assert tokens.count_message_tokens([sized], tokenizer="bytes4").tolist() == [1001]


def test_case_22_shape_counts_tens_of_thousands_of_tokens():
    """A 48-page contract of ~540 tokens of text per page: well above 50k, as case 22 requires."""
    texts = [(LOREM.format(n=n) * 6)[:2400] for n in range(48)]
    counts = tokens.count_message_tokens([anthropic_pdf_message(make_pdf(texts))])
    assert counts[0] > 50_700
    assert np.issubdtype(counts.dtype, np.int64)


def test_pdf_block_a_reader_did_not_count_as_binary_is_still_counted():
    """An OpenAI ``file`` block in a file read as Anthropic messages: no binary block was counted."""
    data = make_pdf([LOREM.format(n=1)])
    url = "data:application/pdf;base64," + base64.b64encode(data).decode()
    raw = {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "file", "file": {"file_data": url}}]}
    counted = tokens.count_message_tokens([Message("user", "q", images=0, raw=raw), Message("user", "q")])
    assert counted[0] - counted[1] == tokens.document_tokens(Document(PDF_MEDIA_TYPE, data))


# ---------------------------------------------------------------- documents given by reference

REFERENCES = [
    ({"type": "document", "source": {"type": "url", "url": "https://example.org/a.pdf"}}, "https://example.org/a.pdf"),
    ({"type": "document", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}}, "file_011CNha8iCJcU1wXNR6q4V8w"),
    ({"type": "file", "file": {"file_id": "file-abc123"}}, "file-abc123"),  # OpenAI Chat Completions
    ({"type": "input_file", "file_id": "file-abc123"}, "file-abc123"),  # OpenAI Responses
    ({"type": "input_file", "file_url": "https://example.org/b.pdf"}, "https://example.org/b.pdf"),
    ({"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/c.pdf"}}, "gs://bucket/c.pdf"),  # Gemini
]


@pytest.mark.parametrize(("block", "reference"), REFERENCES)
def test_document_given_by_reference_costs_one_page_of_the_per_page_estimate(block, reference):
    found = find_documents({"role": "user", "content": [block]})
    assert found == [Document(PDF_MEDIA_TYPE, reference=reference)]
    # Anthropic's PDF guide: 1,500-3,000 text tokens per page (middle: 2,250) plus the page as an image (1,600)
    assert tokens.document_tokens(found[0]) == tokens.REFERENCED_DOCUMENT_TOKENS == 2250 + 1600


def test_referenced_document_is_counted_once_not_also_as_an_image():
    block, _ = REFERENCES[0]
    message = Message("user", "", images=1, raw={"role": "user", "content": [block]})
    assert int(tokens.count_message_tokens([message])[0]) == tokens.MESSAGE_OVERHEAD_TOKENS + 3850
    assert tokens.referenced_documents([message, Message("user", "hi")]) == 1


def test_plan_notes_that_a_referenced_document_is_estimated(tmp_path):
    import json

    from dp_compact.api import plan_file
    from dp_compact.settings import load_settings

    path = tmp_path / "s.jsonl"
    lines = [{"role": "user", "content": [REFERENCES[1][0], {"type": "text", "text": "Summarize the contract."}]},
             {"role": "assistant", "content": "It is a lease."}, {"role": "user", "content": "Thanks"}]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    notes = plan_file(path, load_settings(), use_cache=False).notes
    assert any("1 document(s) given by URL or file id" in n and "3,850 tokens" in n for n in notes)
