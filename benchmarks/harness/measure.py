"""Measure the real model stages on this machine and fit their cost curves.

Each stage runs in a fresh process, so its peak resident memory (model + batch) is its
own. Time is the process's CPU time (all its threads), so that other load on a shared
machine does not inflate it. ``PYTHONPATH=benchmarks python -m harness.measure`` rewrites ``calibration.json``.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import time

import numpy as np

from harness.calibration import CALIBRATION_FILE, CostCurve, fit_curve, save_curves


UNITS = {"ocr": "megapixels", "embed": "chars", "parse": "pages", "decode": "frame_megapixels"}
"""Work unit of each measured stage."""


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _measure(stage: str, batch_sizes: list[int], queue) -> None:
    import psutil

    from trident.demos.pdfgen import page_image, sentences
    from trident.demos.pdf import EmbedText, OcrPages

    rng = np.random.default_rng(0)
    baseline = psutil.Process().memory_info().rss
    if stage == "ocr":
        from PIL import Image
        import io

        model = OcrPages()
        png = page_image([" ".join(sentences(rng, 1)[0].split()[:6]) for _ in range(12)])
        mp_per_item = np.prod(Image.open(io.BytesIO(png)).size) / 1e6
        make = lambda n: {"text": np.array([""] * n, dtype=object), "image": np.array([png] * n, dtype=object),
                          "chars": np.zeros(n, dtype=np.int64)}
        units = lambda n: n * mp_per_item
    elif stage == "embed":
        model = EmbedText()
        text = " ".join(sentences(rng, 12))
        make = lambda n: {"text": np.array([text] * n, dtype=object), "status": np.array(["ok"] * n, dtype=object),
                          "image": np.array([b""] * n, dtype=object)}
        units = lambda n: n * len(text)
    elif stage == "parse":
        import tempfile
        from pathlib import Path

        from trident.demos.pdf import parse_pdfs
        from trident.demos.pdfgen import write_corpus

        doc = write_corpus(tempfile.mkdtemp(), short=0, long=1, two_column=0, scanned=0, duplicate=False,
                           encrypted=False, long_pages=4)[0]
        data = Path(doc.path).read_bytes()
        model = parse_pdfs
        make = lambda n: {"path": np.array([doc.path] * n, dtype=object), "bytes": np.array([data] * n, dtype=object)}
        units = lambda n: n * doc.pages
    else:  # decode: decode + scene detection + keyframes of an SD clip
        import tempfile
        from pathlib import Path

        from trident.demos.video import split_scenes
        from trident.demos.videogen import write_clip

        clip = write_clip(Path(tempfile.mkdtemp()) / "c.mp4", seed=0, resolution="sd", scenes=3)
        data = Path(clip.path).read_bytes()
        model = split_scenes
        make = lambda n: {"path": np.array([clip.path] * n, dtype=object), "bytes": np.array([data] * n, dtype=object)}
        units = lambda n: n * clip.n_frames * clip.width * clip.height / 1e6
    model(make(1))  # warm-up
    points = []
    for n in batch_sizes:
        t0 = time.process_time()
        model(make(n))
        points.append((float(units(n)), time.process_time() - t0, _peak_rss_bytes() - baseline))
    queue.put(points)


def measure(stage: str, batch_sizes: list[int]) -> CostCurve:
    """Fit ``stage`` (see ``UNITS``) from batches of the given sizes."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(stage, sorted(batch_sizes), queue))
    proc.start()
    points = queue.get(timeout=600)
    proc.join()
    unit = UNITS[stage]
    where = f"{platform.node()} ({platform.processor() or platform.machine()}), {time.strftime('%Y-%m-%d')}"
    return fit_curve(stage, unit, [p[0] for p in points], [p[1] for p in points], [p[2] for p in points],
                     measured_on=where)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ocr-batches", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--embed-batches", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--cpu-batches", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", default=str(CALIBRATION_FILE))
    args = parser.parse_args(argv)
    curves = {"ocr": measure("ocr", args.ocr_batches), "embed": measure("embed", args.embed_batches),
              "parse": measure("parse", args.cpu_batches), "decode": measure("decode", args.cpu_batches)}
    save_curves(curves, args.out)
    for c in curves.values():
        print(f"{c.stage}: {c.fixed_s:.3f} s + {c.per_unit_s:.3g} s/{c.unit}; "
              f"{c.base_bytes / 2**20:.0f} MiB + {c.per_unit_bytes / 2**20:.3g} MiB/{c.unit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
