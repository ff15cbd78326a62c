"""PDF curation with trident: extract text, OCR scanned pages, embed, drop near-duplicates.

    python examples/pdf_curation.py [PDF_FOLDER ...] [--out OUT]

Without folders it generates a small corpus (short, long, two-column, scanned, a near-copy,
an encrypted file). Pipeline: read_binary_files -> parse (pypdf, CPU tasks) -> OCR of
image-only pages (RapidOCR, actor pool on GPUs) -> embed (all-MiniLM-L6-v2, actor pool on
GPUs) -> Parquet; then a per-document near-duplicate filter (cosine >= 0.95 on the
normalised mean of page embeddings). Encrypted or damaged files are reported and skipped.
"""
import argparse
import os
import tempfile
from pathlib import Path

import ray
from ray.data import ActorPoolStrategy

import trident
from trident.demos.pdf import EmbedText, OcrPages, curate_documents, list_pdfs, parse_pdfs, read_pages
from trident.demos.pdfgen import write_corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", help="folders of PDFs (default: a generated corpus)")
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="pdf-curation-"))
    parser.add_argument("--memory-limit", default="8GiB")
    args = parser.parse_args()
    out = Path(args.out)

    folders = args.folders or [str(out / "input")]
    if not args.folders:
        write_corpus(out / "input", seed=0, short=4, long=1, two_column=1, scanned=1)
    paths = list_pdfs(*folders)

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # a new local Ray with logical GPUs; on a GPU cluster: ray.init() and the same pipeline
    ray.init(address="local", num_cpus=4, num_gpus=2,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}})

    ds = (ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=len(paths))
          .map_batches(parse_pdfs, batch_size=1)                                     # CPU tasks
          .map_batches(OcrPages, compute=ActorPoolStrategy(min_size=1, max_size=2), num_gpus=0.5, batch_size=4)
          .map_batches(EmbedText, compute=ActorPoolStrategy(min_size=1, max_size=2), num_gpus=0.5, batch_size=16))

    with trident.autoscale(memory_limit=args.memory_limit) as run:   # policy="trident"
        ds.write_parquet(str(out / "pages"))

    docs = curate_documents(read_pages(out / "pages"))
    docs.drop(columns=["embedding"]).to_parquet(out / "documents.parquet")
    for row in docs.itertuples():
        print(f"{Path(row.path).name:40s} {row.status:9s} pages={row.n_pages} ocr={row.ocr_pages} {row.reason}")
    missing = set(paths) - set(docs["path"])
    print(f"{len(paths)} documents in, {len(docs)} accounted for, missing: {sorted(missing) or 'none'}")

    run.report()
    run.plot(str(out / "run.png"))
    print(f"output: {out}")
    ray.shutdown()


if __name__ == "__main__":
    main()
