"""Generate short video clips with known scene cuts (PyAV), the ground truth for scene detection.

Each scene has its own background colour and a moving square; some scenes carry
rendered on-screen text. Cuts are hard cuts at known frame indices.
"""
from __future__ import annotations

import colorsys
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RESOLUTIONS = {"tiny": (160, 120), "sd": (640, 480), "hd": (1280, 720)}
"""Name -> (width, height) in pixels."""


@dataclass(frozen=True)
class GeneratedClip:
    """One generated clip: where it is, and the first frame of every scene after the first."""

    path: str
    cut_frames: tuple[int, ...]
    n_frames: int
    fps: int
    width: int
    height: int
    scene_texts: tuple[str, ...]


def _scene_base(width: int, height: int, hue: float, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    rgb = tuple(int(255 * c) for c in colorsys.hsv_to_rgb(hue, 0.65, 0.85))
    img = Image.new("RGB", (width, height), color=rgb)
    if text:
        draw = ImageDraw.Draw(img)
        font = ImageFont.load_default(size=max(12, height // 8))
        draw.rectangle((0, height // 2 - height // 8, width, height // 2 + height // 8), fill=(255, 255, 255))
        draw.text((width // 16, height // 2 - height // 12), text, fill=(0, 0, 0), font=font)
    return np.asarray(img, dtype=np.uint8)


def scene_frames(rng: np.random.Generator, *, width: int, height: int, n_frames: int, hue: float,
                 text: str = "") -> np.ndarray:
    """Frames of one scene, shape (n_frames, height, width, 3), uint8: a fixed background,
    a square moving across it, and mild noise."""
    base = _scene_base(width, height, hue, text)
    side = max(8, height // 6)
    square = np.array([int(255 * c) for c in colorsys.hsv_to_rgb((hue + 0.5) % 1.0, 0.9, 0.6)], dtype=np.uint8)
    y0 = int(rng.integers(0, height - side)) if not text else height // 10
    out = np.empty((n_frames, height, width, 3), dtype=np.uint8)
    for f in range(n_frames):
        frame = base.copy()
        x0 = int((f / max(1, n_frames - 1)) * (width - side))
        frame[y0:y0 + side, x0:x0 + side] = square
        noise = rng.integers(-6, 7, size=(height // 4, width // 4, 1), dtype=np.int16)
        noise = np.repeat(np.repeat(noise, 4, axis=0), 4, axis=1)[:height, :width]
        out[f] = np.clip(frame.astype(np.int16) + noise, 0, 255).astype(np.uint8)
    return out


def encode_clip(frames: np.ndarray, *, fps: int, codec: str = "mpeg4") -> bytes:
    """Encode frames (n, h, w, 3) uint8 to an MP4 in memory."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = max(1_000_000, int(frames.shape[1] * frames.shape[2] * fps * 0.5))
        for arr in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def write_clip(path: str | Path, *, seed: int, resolution: str = "tiny", scenes: int = 3, fps: int = 12,
               scene_s: tuple[float, float] = (1.0, 2.0), text_every: int = 2) -> GeneratedClip:
    """One clip of ``scenes`` scenes, each ``scene_s`` seconds long (uniform); every
    ``text_every``-th scene (0 = none) carries on-screen text."""
    width, height = RESOLUTIONS[resolution]
    rng = np.random.default_rng(seed)
    hues = (rng.random() + np.arange(scenes) / scenes) % 1.0
    rng.shuffle(hues)
    parts, cuts, texts, start = [], [], [], 0
    for s in range(scenes):
        n = int(round(rng.uniform(*scene_s) * fps))
        text = f"SCENE {s + 1} CLIP {seed}" if text_every and s % text_every == 0 else ""
        parts.append(scene_frames(rng, width=width, height=height, n_frames=n, hue=float(hues[s]), text=text))
        texts.append(text)
        if s:
            cuts.append(start)
        start += n
    data = encode_clip(np.concatenate(parts), fps=fps)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)
    return GeneratedClip(path=str(path), cut_frames=tuple(cuts), n_frames=start, fps=fps, width=width,
                         height=height, scene_texts=tuple(texts))


def write_clips(out_dir: str | Path, *, n: int, seed: int = 0, resolution: str = "tiny", prefix: str = "clip",
                **kwargs) -> list[GeneratedClip]:
    """``n`` clips named ``{prefix}-{i:03d}.mp4``, seeds ``seed + i``."""
    return [write_clip(Path(out_dir) / f"{prefix}-{i:03d}.mp4", seed=seed + i, resolution=resolution, **kwargs)
            for i in range(n)]
