"""FGD's GPU allocation-ratio experiment on the Alibaba 2023 (openb) pod lists, every placer.

    python benchmarks/fgd_allocation.py [--data ../shared/data/traces/alibaba-gpu-2023/fgd]
        [--lists default,cpu050,...] [--seeds 42-51] [--fgd-seeds 42-44] [--out benchmarks/results]

Writes ``<stem>.json`` (default ``fgd_allocation.json``) (RESULTS.md shape; a row per pod list and placer with the mean
allocation ratio at 100 % arrived GPU demand and the published one) and
``fgd_allocation_<list>.png`` (allocation-ratio curves).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from trident.jobs.frag_placers import PLACERS
from trident.sim.allocation_report import experiment, parse_seeds, plot
from trident.sim.compare import result_document

DATA = Path(os.environ.get("TRIDENT_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
LISTS = "default,cpu050,cpu100,cpu200,cpu250,gpushare40,gpushare60,gpushare80,gpushare100"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA / "traces" / "alibaba-gpu-2023" / "fgd"))
    ap.add_argument("--lists", default=LISTS)
    ap.add_argument("--placers", default=",".join(PLACERS))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--fgd-seeds", default="42-44", help="seeds for the (slower) fgd placer")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--stem", default="fgd_allocation", help="name of the JSON written under --out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.lists.split(","):
        pods = Path(args.data) / f"openb_pod_list_{name}.csv"
        curves_all = {}
        for placer in args.placers.split(","):
            seeds = parse_seeds(args.fgd_seeds if placer.startswith("fgd") else args.seeds)
            r, curves = experiment(pods, [placer], seeds, log=lambda m: print(m, flush=True))
            for row in r:
                row["pod_list"] = name
            rows += r
            curves_all.update(curves)
        plot(curves_all, out / f"fgd_allocation_{name}.png", f"openb_pod_list_{name}")
        doc = result_document(rows, workload={"name": "openb-allocation", "seed": args.seeds, "tune_ratio": 1.3,
                                              "fgd_seeds": args.fgd_seeds}, benchmark="fgd_allocation")
        (out / f"{args.stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
