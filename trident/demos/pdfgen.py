"""Generate a PDF corpus with fpdf2: short text, long text, two-column, image-only
("scanned") pages, an exact near-duplicate, and an encrypted document.

Every document's kind is known, so a pipeline's output can be checked against it.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_WORDS = (
    "data pipeline throughput memory operator replica batch model cluster scheduler "
    "document page text image scene video frame feature embedding quality filter "
    "river mountain forest ocean city garden library market station harbour bridge "
    "morning evening winter summer signal sensor network storage compute budget"
).split()

KINDS = ("short", "long", "two_column", "scanned", "duplicate", "encrypted")


@dataclass(frozen=True)
class GeneratedPdf:
    """One generated file and what a correct pipeline must make of it."""

    path: str
    kind: str
    pages: int
    encrypted: bool = False


def sentences(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` pseudo-random sentences of 6-14 words from a fixed vocabulary."""
    out = []
    for _ in range(n):
        words = rng.choice(_WORDS, size=int(rng.integers(6, 15)))
        out.append(" ".join(words).capitalize() + ".")
    return out


def _pdf():
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.set_font("Helvetica", size=11)
    return pdf


def text_pdf(paragraphs: list[str], *, pages: int) -> bytes:
    """A text PDF with exactly ``pages`` pages, the paragraphs spread over them."""
    pdf = _pdf()
    per_page = max(1, len(paragraphs) // pages)
    for p in range(pages):
        pdf.add_page()
        chunk = paragraphs[p * per_page:(p + 1) * per_page] if p < pages - 1 else paragraphs[p * per_page:]
        pdf.multi_cell(0, 6, "\n\n".join(chunk) or " ")
    return bytes(pdf.output())


def two_column_pdf(paragraphs: list[str]) -> bytes:
    """One page set in two text columns."""
    pdf = _pdf()
    pdf.add_page()
    with pdf.text_columns(ncols=2, gutter=8) as cols:
        for para in paragraphs:
            cols.write(para + "\n\n")
    return bytes(pdf.output())


def page_image(lines: list[str], *, width_px: int = 1000, font_px: int = 28) -> bytes:
    """Render lines of text into a greyscale PNG, as a scanner would capture them."""
    from PIL import Image, ImageDraw, ImageFont

    line_h = int(font_px * 1.6)
    img = Image.new("L", (width_px, 60 + line_h * len(lines)), color=255)
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=font_px)
    for i, line in enumerate(lines):
        draw.text((40, 30 + i * line_h), line, fill=0, font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def scanned_pdf(pages_lines: list[list[str]]) -> bytes:
    """Image-only pages: the text exists only as pixels, so text extraction finds nothing."""
    pdf = _pdf()
    for lines in pages_lines:
        pdf.add_page()
        pdf.image(io.BytesIO(page_image(lines)), x=10, y=10, w=190)
    return bytes(pdf.output())


def encrypted_pdf(paragraphs: list[str], *, user_password: str = "secret") -> bytes:
    """A text PDF that needs a password to open (RC4, fpdf2's encryption)."""
    pdf = _pdf()
    pdf.set_encryption(owner_password="owner-" + user_password, user_password=user_password)
    pdf.add_page()
    pdf.multi_cell(0, 6, "\n\n".join(paragraphs))
    return bytes(pdf.output())


def _scan_lines(rng: np.random.Generator, n_lines: int) -> list[str]:
    return [" ".join(rng.choice(_WORDS, size=5)) for _ in range(n_lines)]


def write_corpus(out_dir: str | Path, *, seed: int = 0, short: int = 2, long: int = 1, two_column: int = 1,
                 scanned: int = 1, duplicate: bool = True, encrypted: bool = True, long_pages: int = 4,
                 scanned_pages: int = 1, prefix: str = "gen") -> list[GeneratedPdf]:
    """Write a corpus into ``out_dir`` and return what each file is.

    ``duplicate`` adds a copy of the first short document with one word changed in its
    title, which the near-duplicate filter must drop.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    docs: list[GeneratedPdf] = []

    def save(name: str, data: bytes, kind: str, pages: int, enc: bool = False) -> None:
        path = out / f"{prefix}-{name}.pdf"
        path.write_bytes(data)
        docs.append(GeneratedPdf(path=str(path), kind=kind, pages=pages, encrypted=enc))

    first_short: list[str] | None = None
    for i in range(short):
        paras = [" ".join(sentences(rng, 4)) for _ in range(3)]
        first_short = first_short or paras
        save(f"short-{i:03d}", text_pdf([f"Report {i}"] + paras, pages=1), "short", 1)
    for i in range(long):
        paras = [" ".join(sentences(rng, 6)) for _ in range(4 * long_pages)]
        save(f"long-{i:03d}", text_pdf(paras, pages=long_pages), "long", long_pages)
    for i in range(two_column):
        paras = [" ".join(sentences(rng, 5)) for _ in range(6)]
        save(f"twocol-{i:03d}", two_column_pdf(paras), "two_column", 1)
    for i in range(scanned):
        pages = [_scan_lines(rng, 6) for _ in range(scanned_pages)]
        save(f"scanned-{i:03d}", scanned_pdf(pages), "scanned", scanned_pages)
    if duplicate and first_short is not None:
        save("short-dup", text_pdf(["Report copy"] + first_short, pages=1), "duplicate", 1)
    if encrypted:
        save("encrypted", encrypted_pdf([" ".join(sentences(rng, 4))]), "encrypted", 1, enc=True)
    return docs


def write_shifting_corpus(out_dir: str | Path, *, seed: int = 0, text_docs: int = 24, scanned_docs: int = 8,
                          scanned_pages: int = 2) -> list[GeneratedPdf]:
    """A corpus whose mix changes half-way: text documents first (``a-text-*``: short, long,
    two-column, a near-duplicate, an encrypted one), then scanned ones (``b-scan-*``, image-only
    pages that need OCR). Read in name order, the OCR stage's work per row jumps when the
    scanned documents arrive."""
    n_long = max(1, text_docs // 6)
    n_two = max(1, text_docs // 6)
    n_short = max(1, text_docs - n_long - n_two - 2)
    docs = write_corpus(out_dir, seed=seed, short=n_short, long=n_long, two_column=n_two, scanned=0,
                        long_pages=3, prefix="a-text")
    return docs + write_corpus(out_dir, seed=seed + 1, short=0, long=0, two_column=0, scanned=scanned_docs,
                               scanned_pages=scanned_pages, duplicate=False, encrypted=False, prefix="b-scan")
