"""The curation examples end to end on a real local Ray (logical GPUs), under trident.autoscale:
every input document and clip comes out exactly once (processed or skipped with a reason),
and the detected scene cuts match the generated ground truth."""
import os
from pathlib import Path

import numpy as np
import pytest

from trident.demos.pdf import EMBED_DIM, build_pdf_dataset, curate_documents, read_pages
from trident.demos.pdfgen import write_corpus
from trident.demos.runner import SAMPLES_PDF_DIR, account
from trident.demos.scenes import match_cuts
from trident.demos.video import build_video_dataset, summarize_clips
from trident.demos.videogen import write_clips

ENCRYPTED_SAMPLE = SAMPLES_PDF_DIR / "libreoffice-writer-password.pdf"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    import ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}})
    yield
    ray.shutdown()


def test_pdf_pipeline_accounts_for_every_document(tmp_path):
    import trident

    docs = write_corpus(tmp_path / "in", seed=2, short=1, long=1, two_column=0, scanned=1, long_pages=2)
    paths = [d.path for d in docs] + ([str(ENCRYPTED_SAMPLE)] if ENCRYPTED_SAMPLE.exists() else [])
    ds = build_pdf_dataset(paths, ocr_pool=(1, 1), embed_pool=(1, 1))
    with trident.autoscale(policy="trident", interval_s=0.5) as run:
        ds.write_parquet(str(tmp_path / "pages"))
    pages = read_pages(tmp_path / "pages")
    # page level: each (document, page) exactly once
    keys = list(zip(pages["path"], pages["page"]))
    assert len(keys) == len(set(keys)) == sum(d.pages for d in docs if not d.encrypted) + (len(paths) - len(docs)) + 1
    table = curate_documents(pages)
    acc = account(paths, table["path"].tolist(), table["status"].tolist(), table["reason"].tolist())
    assert acc.complete, acc
    by_kind = {d.kind: d.path for d in docs}
    status = dict(zip(table["path"], table["status"]))
    reason = dict(zip(table["path"], table["reason"]))
    assert status[by_kind["encrypted"]] == "skipped" and "encrypted" in reason[by_kind["encrypted"]]
    if ENCRYPTED_SAMPLE.exists():
        assert status[str(ENCRYPTED_SAMPLE)] == "skipped"
    assert status[by_kind["duplicate"]] == "duplicate" and status[by_kind["short"]] == "kept"
    scanned = table[table["path"] == by_kind["scanned"]].iloc[0]
    assert scanned["ocr_pages"] == 1 and scanned["chars"] > 20  # OCR read the pixels
    emb = np.stack(pages[pages["status"] == "ok"]["embedding"].to_list())
    assert emb.shape[1] == EMBED_DIM and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3)
    assert run.summary()["executions"] == 1 and run.summary()["decisions"] > 0


def test_video_pipeline_finds_the_true_cuts(tmp_path):
    import trident

    clips = write_clips(tmp_path / "in", n=3, seed=7, resolution="tiny", scenes=3)
    broken = tmp_path / "in" / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    paths = [c.path for c in clips] + [str(broken)]
    ds = build_video_dataset(paths, ocr_pool=(1, 1), embed_pool=(1, 1))
    with trident.autoscale(policy="trident", interval_s=0.5):
        ds.write_parquet(str(tmp_path / "scenes"))
    scenes = read_pages(tmp_path / "scenes")
    keys = list(zip(scenes["clip"], scenes["scene"]))
    assert len(keys) == len(set(keys))
    table = summarize_clips(scenes)
    acc = account(paths, table["clip"].tolist(), table["status"].tolist(), table["reason"].tolist())
    assert acc.complete, acc
    assert acc.skipped and "undecodable" in acc.skipped[str(broken)]
    found = dict(zip(table["clip"], table["cut_frames"]))
    for c in clips:
        assert match_cuts(list(found[c.path]), list(c.cut_frames), tolerance_frames=0) == (len(c.cut_frames), 0, 0)
    texts = " ".join(table["text"]).replace(" ", "")
    assert "SCENE1" in texts  # on-screen text read by OCR
