"""Video curation with trident: scene cuts, keyframes, quality, on-screen text, embeddings.

    python examples/video_curation.py [--clips 4] [--resolution sd] [--out OUT]

Generates clips with known scene cuts (PyAV), then: read_binary_files -> decode + detect
scenes (colour-histogram cuts) + keyframes with sharpness/brightness (CPU tasks) -> OCR of
keyframes (RapidOCR, actor pool on GPUs) -> keyframe embedding (a 512-d colour histogram,
actor pool) -> Parquet. Prints the cuts found next to the ground truth.
"""
import argparse
import os
import tempfile
from pathlib import Path

import ray
from ray.data import ActorPoolStrategy

import trident
from trident.demos.pdf import read_pages
from trident.demos.video import EmbedKeyframes, OcrKeyframes, split_scenes, summarize_clips
from trident.demos.videogen import write_clips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=4)
    parser.add_argument("--resolution", default="sd", choices=("tiny", "sd", "hd"))
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="video-curation-"))
    parser.add_argument("--memory-limit", default="8GiB")
    args = parser.parse_args()
    out = Path(args.out)

    clips = write_clips(out / "input", n=args.clips, seed=0, resolution=args.resolution, scenes=3)
    paths = [c.path for c in clips]

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=4, num_gpus=2, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})

    ds = (ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=len(paths))
          .map_batches(split_scenes, batch_size=1)                                   # CPU tasks
          .map_batches(OcrKeyframes, compute=ActorPoolStrategy(min_size=1, max_size=2), num_gpus=0.5, batch_size=4)
          .map_batches(EmbedKeyframes, compute=ActorPoolStrategy(min_size=1, max_size=2), num_gpus=0.25,
                       batch_size=16))

    with trident.autoscale(memory_limit=args.memory_limit) as run:
        ds.write_parquet(str(out / "scenes"))

    table = summarize_clips(read_pages(out / "scenes"))
    table.to_parquet(out / "clips.parquet")
    truth = {c.path: list(c.cut_frames) for c in clips}
    for row in table.itertuples():
        print(f"{Path(row.clip).name}: {row.n_scenes} scenes, cuts {list(row.cut_frames)} "
              f"(truth {truth[row.clip]}), text: {row.text!r}")

    run.report()
    run.plot(str(out / "run.png"))
    print(f"output: {out}")
    ray.shutdown()


if __name__ == "__main__":
    main()
