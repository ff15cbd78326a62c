"""Run the curation examples end to end on a local Ray: generate inputs, execute the
pipeline (under ``trident.autoscale`` unless ``policy`` is None), and account for every input."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

WORKER_ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
              "TOKENIZERS_PARALLELISM": "false"}
SAMPLES_PDF_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "samples" / "pdf"
"""The real sample PDFs next to a development checkout (used when present)."""


@dataclass(frozen=True)
class Accounting:
    """Which inputs came out of a pipeline: every input must appear exactly once."""

    inputs: int
    processed: int
    skipped: dict[str, str]
    missing: tuple[str, ...]
    duplicated: tuple[str, ...]
    unexpected: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected)


def account(inputs: list[str], keys: list[str], statuses: list[str], reasons: list[str]) -> Accounting:
    """Per-input accounting from one output row per input (``keys``: the input each row stands for)."""
    from collections import Counter

    counts = Counter(keys)
    want = set(inputs)
    skipped = {k: r for k, s, r in zip(keys, statuses, reasons) if s == "skipped"}
    return Accounting(inputs=len(inputs), processed=sum(1 for k, s in zip(keys, statuses) if s != "skipped"),
                      skipped=skipped, missing=tuple(sorted(want - set(counts))),
                      duplicated=tuple(sorted(k for k, c in counts.items() if c > 1)),
                      unexpected=tuple(sorted(set(counts) - want)))


def start_ray(*, num_cpus: int = 4, num_gpus: int = 2, verbose: bool = True) -> None:
    """A new local Ray with logical GPUs (``num_gpus`` need not exist physically); never an
    existing cluster on this machine. ``verbose=False`` keeps Ray's own log lines and
    progress bars off the terminal (warnings and errors still show)."""
    import logging

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": dict(WORKER_ENV)},
                 logging_level=logging.INFO if verbose else logging.WARNING)
    if not verbose:
        quiet_ray_data()


def quiet_ray_data() -> None:
    """Ray Data's console lines (dataset started/finished, progress bars) off; its log file stays
    (errors still show)."""
    import logging

    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, logging.FileHandler) and "File" not in type(handler).__name__:
            handler.setLevel(logging.ERROR)


def _autoscale(policy: str | None, memory_limit: str | None, interval_s: float | None, history: bool):
    if policy is None:
        return nullcontext(None)
    import trident

    kwargs = {"policy": policy, "memory_limit": memory_limit, "history": history}
    if interval_s is not None:
        kwargs["interval_s"] = interval_s
    return trident.autoscale(**kwargs)


@dataclass
class DemoResult:
    """What a demo run produced."""

    kind: str
    out_dir: str
    wall_s: float
    rows: int
    """Rows the pipeline wrote (pages or scenes)."""
    accounting: Accounting
    table: object
    """pandas DataFrame: one row per input document or clip."""
    run: object = None
    """The ``trident.Run`` (None when run without trident)."""
    notes: list[str] = field(default_factory=list)


PDF_SIZES = {"full": {"text_docs": 60, "scanned_docs": 10, "scanned_pages": 2},
             "small": {"text_docs": 6, "scanned_docs": 2, "scanned_pages": 1}}
"""The demo's corpus: text documents first, then scanned ones (``--small`` for a quick run)."""
VIDEO_SIZES = {"full": {"clips": 8}, "small": {"clips": 2}}
"""The demo's clips: the first half at SD, the second at HD (``--small`` for a quick run)."""


def pdf_inputs(in_dir: str | Path, *, text_docs: int, scanned_docs: int, scanned_pages: int, seed: int = 0,
               samples_dir: str | Path | None = SAMPLES_PDF_DIR) -> list[str]:
    """Write the shifting corpus (:func:`~trident.demos.pdfgen.write_shifting_corpus`) and list
    the input in the order it is read: the real samples when present, the text documents, the scans."""
    from trident.demos.pdf import list_pdfs
    from trident.demos.pdfgen import write_shifting_corpus

    write_shifting_corpus(in_dir, seed=seed, text_docs=text_docs, scanned_docs=scanned_docs,
                          scanned_pages=scanned_pages)
    return list_pdfs(*([samples_dir] if samples_dir else []), in_dir)


def video_inputs(in_dir: str | Path, *, clips: int, seed: int = 0) -> tuple[list[str], dict[str, tuple[int, ...]]]:
    """Write ``clips`` clips, the first half at SD and the rest at HD (frames 4x the pixels);
    return their paths in reading order and each clip's true cut frames."""
    from trident.demos.video import list_clips
    from trident.demos.videogen import write_clips

    half = max(1, clips // 2)
    made = (write_clips(in_dir, n=half, seed=seed, resolution="sd", prefix="a-sd", scenes=3)
            + write_clips(in_dir, n=clips - half, seed=seed + half, resolution="hd", prefix="b-hd", scenes=3))
    return list_clips(in_dir), {c.path: tuple(c.cut_frames) for c in made}


def run_pdf(paths: list[str], out_dir: str | Path, *, policy: str | None = "trident", memory_limit: str | None = None,
            interval_s: float | None = None, ocr_pool: tuple[int, int] = (1, 3), embed_pool: tuple[int, int] = (1, 3),
            progress: TextIO | None = None, history: bool = True) -> DemoResult:
    """Curate the PDFs ``paths``: write ``pages/`` (Parquet) and ``documents.parquet`` under ``out_dir``
    (``history``: as ``trident.autoscale``'s)."""
    from trident.demos.pdf import build_pdf_dataset, curate_documents, read_pages

    out = Path(out_dir)
    ds = build_pdf_dataset(paths, ocr_pool=ocr_pool, embed_pool=embed_pool)
    t0 = time.perf_counter()
    with _autoscale(policy, memory_limit, interval_s, history) as run, _progress(run, len(paths), "docs", progress):
        ds.write_parquet(str(out / "pages"))
    wall_s = time.perf_counter() - t0
    pages = read_pages(out / "pages")
    docs_df = curate_documents(pages)
    docs_df.drop(columns=["embedding"]).to_parquet(out / "documents.parquet")
    acc = account(paths, docs_df["path"].tolist(), docs_df["status"].tolist(), docs_df["reason"].tolist())
    return DemoResult(kind="pdf", out_dir=str(out), wall_s=wall_s, rows=len(pages), accounting=acc, table=docs_df,
                      run=run)


def run_video(paths: list[str], truth: dict[str, tuple[int, ...]], out_dir: str | Path, *,
              policy: str | None = "trident", memory_limit: str | None = None, interval_s: float | None = None,
              ocr_pool: tuple[int, int] = (1, 3), embed_pool: tuple[int, int] = (1, 3),
              progress: TextIO | None = None, history: bool = True) -> DemoResult:
    """Curate the clips ``paths``: write ``scenes/`` (Parquet) and ``clips.parquet``; a note per
    clip says whether the detected cuts match ``truth``."""
    from trident.demos.pdf import read_pages
    from trident.demos.scenes import match_cuts
    from trident.demos.video import build_video_dataset, summarize_clips

    out = Path(out_dir)
    ds = build_video_dataset(paths, ocr_pool=ocr_pool, embed_pool=embed_pool)
    t0 = time.perf_counter()
    with _autoscale(policy, memory_limit, interval_s, history) as run, _progress(run, len(paths), "clips", progress):
        ds.write_parquet(str(out / "scenes"))
    wall_s = time.perf_counter() - t0
    scenes = read_pages(out / "scenes")
    clips_df = summarize_clips(scenes)
    clips_df.to_parquet(out / "clips.parquet")
    notes = []
    for clip, found in zip(clips_df["clip"], clips_df["cut_frames"]):
        matched, missed, spurious = match_cuts(list(found), list(truth.get(clip, ())))
        notes.append(f"{Path(clip).name}: cuts {list(found)} vs truth {list(truth.get(clip, ()))} "
                     f"({matched} matched, {missed} missed, {spurious} spurious)")
    acc = account(paths, clips_df["clip"].tolist(), clips_df["status"].tolist(), clips_df["reason"].tolist())
    return DemoResult(kind="video", out_dir=str(out), wall_s=wall_s, rows=len(scenes), accounting=acc,
                      table=clips_df, run=run, notes=notes)


@contextmanager
def quiet_ray(log_path: str | Path):
    """Send what is written to this process's stdout and stderr (Ray's C++ core and Python log
    lines, and the raylet's messages Ray's driver prints, e.g. "A worker died or was killed") to
    ``log_path`` while the block runs; yields a stream to the real stderr (for progress)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    terminal = os.fdopen(os.dup(saved[2]), "w", buffering=1)
    with open(log_path, "ab") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            terminal.close()


@contextmanager
def _progress(run, total: int, unit: str, stream: TextIO | None):
    """Progress on ``stream`` while the block runs: inputs read, rows out of the last model
    stage, and the model pools' live actors as trident's record shows them. A bar redrawn
    twice a second on a terminal; a plain line every 15 s otherwise."""
    if stream is None or run is None:
        yield
        return
    import threading

    from tqdm import tqdm

    from trident.report.plot import short_name

    tty = stream.isatty()
    stop = threading.Event()
    t0 = time.perf_counter()
    bar = tqdm(total=total, unit=unit, desc=f"{run.config.policy_name:>8}", file=stream, leave=True,
               bar_format="{desc} {bar:20} {n_fmt}/{total_fmt} {unit} {elapsed} | {postfix}", disable=not tty)

    def status() -> tuple[int, str]:
        snaps = run.executions[-1].snapshots if run.executions else []
        ops = [o for o in snaps[-1].operators if o.config.kind != "other"] if snaps else []
        if not ops:
            return 0, "starting"
        models = [o for o in ops if o.config.kind == "actor"]
        rows = models[-1].rows_out_total if models else ops[-1].rows_out_total
        pools = " ".join(f"{short_name(o.name)} x{o.actors_running}" for o in models)
        return min(total, ops[0].tasks_finished), f"{rows} rows out | actors: {pools}"

    def loop() -> None:
        while not stop.wait(0.5 if tty else 15.0):
            try:
                done, text = status()
                if tty:
                    bar.n = done
                    bar.set_postfix_str(text)
                else:
                    print(f"{run.config.policy_name:>8}: {done}/{total} {unit} read, {text}, "
                          f"{time.perf_counter() - t0:.0f} s", file=stream, flush=True)
            except Exception:  # noqa: BLE001 - progress never fails the run
                pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if tty:
            try:
                bar.n, text = status()
                bar.set_postfix_str(text)
            except Exception:  # noqa: BLE001
                pass
        bar.close()
