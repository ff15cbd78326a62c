"""Near-duplicate filter: cosine similarity on L2-normalised embeddings, greedy in a fixed order.

The first item of each group of near-duplicates is kept; every later one whose cosine
similarity to a kept item reaches ``threshold`` is dropped and names the item it duplicates.
"""
from __future__ import annotations

import numpy as np

from trident.core.errors import ConfigError


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def near_duplicates(embeddings: np.ndarray, *, threshold: float = 0.95) -> list[int | None]:
    """For each row, ``None`` if kept, else the index of the kept row it duplicates.

    ``embeddings``: shape (n, d). Zero rows (nothing to embed) are always kept.
    """
    if not 0.0 < threshold <= 1.0:
        raise ConfigError("threshold", threshold, "a cosine similarity in (0, 1]")
    emb = normalise_rows(np.atleast_2d(embeddings)) if len(embeddings) else np.zeros((0, 1), np.float32)
    kept: list[int] = []
    out: list[int | None] = []
    for i, row in enumerate(emb):
        if not row.any() or not kept:
            out.append(None)
            if row.any():
                kept.append(i)
            continue
        sims = emb[kept] @ row
        j = int(np.argmax(sims))
        if sims[j] >= threshold:
            out.append(kept[j])
        else:
            out.append(None)
            kept.append(i)
    return out
