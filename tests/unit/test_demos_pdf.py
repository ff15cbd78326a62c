"""PDF parsing of generated documents: text pages, image-only pages, encrypted and damaged files."""
from pathlib import Path

import numpy as np
import pytest

from trident.demos.pdf import parse_pdf, parse_pdfs
from trident.demos.pdfgen import write_corpus
from trident.demos.runner import account


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("pdfs"), seed=1, short=1, long=1, two_column=1, scanned=1,
                        long_pages=3, scanned_pages=2)


def _rows(doc):
    return parse_pdf(doc.path, Path(doc.path).read_bytes())


def test_text_pages_extracted_one_row_per_page(corpus):
    for doc in corpus:
        if doc.kind in ("short", "long", "two_column", "duplicate"):
            rows = _rows(doc)
            assert [r["page"] for r in rows] == list(range(doc.pages))
            assert all(r["status"] == "ok" and r["source"] == "text" and r["chars"] > 100 for r in rows)


def test_image_only_pages_go_to_ocr_with_their_image(corpus):
    doc = next(d for d in corpus if d.kind == "scanned")
    rows = _rows(doc)
    assert len(rows) == 2
    assert all(r["source"] == "ocr" and r["image"][:4] == b"\x89PNG" and r["text"] == "" for r in rows)


def test_encrypted_document_skipped_with_reason(corpus):
    doc = next(d for d in corpus if d.encrypted)
    (row,) = _rows(doc)
    assert row["status"] == "skipped" and "encrypted" in row["reason"]


def test_damaged_document_skipped_with_reason():
    (row,) = parse_pdf("broken.pdf", b"%PDF-1.4 this is not a pdf")
    assert row["status"] == "skipped" and row["reason"].startswith("unreadable")


def test_batch_keeps_every_document(corpus):
    batch = {"path": np.array([d.path for d in corpus], dtype=object),
             "bytes": np.array([Path(d.path).read_bytes() for d in corpus], dtype=object)}
    out = parse_pdfs(batch)
    assert set(out["path"]) == {d.path for d in corpus}
    assert len(out["path"]) == sum(d.pages for d in corpus if not d.encrypted) + 1


def test_accounting_flags_missing_duplicated_and_unexpected():
    acc = account(["a", "b", "c"], ["a", "a", "d"], ["ok", "ok", "skipped"], ["", "", "why"])
    assert acc.missing == ("b", "c") and acc.duplicated == ("a",) and acc.unexpected == ("d",)
    assert not acc.complete
    ok = account(["a", "b"], ["b", "a"], ["ok", "skipped"], ["", "encrypted"])
    assert ok.complete and ok.processed == 1 and ok.skipped == {"a": "encrypted"}
