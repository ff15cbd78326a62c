"""The allocation experiment's pod-list loader: lists without ``gpu_spec`` (the ``multigpu*``
ones) allow every GPU model, lists with it still restrict models, bad rows are named by line."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

from trident.core.errors import TraceFormatError
from trident.sim.allocation import Cluster, load_pods

DATA = Path(os.environ.get("TRIDENT_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))
FGD = DATA / "traces" / "alibaba-gpu-2023" / "fgd"
CLUSTER = Cluster(np.array([64000] * 3), np.array([1 << 18] * 3), np.array([8, 8, 4]), np.array([0, 1, 2]),
                  ("A10", "T4", "V100M32"))
MULTIGPU_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"   # openb_pod_list_multigpu*.csv
SPEC_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos"


def write(tmp_path, header, rows):
    path = tmp_path / "openb_pod_list_test.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_a_list_without_gpu_spec_lets_every_pod_use_any_model(tmp_path):
    path = write(tmp_path, MULTIGPU_HEADER, ["p0,12000,16384,1,1000", "p1,6000,12288,1,460",
                                             "p2,88000,327680,8,1000", "p3,20000,65536,0,0"])
    pods = load_pods(path, CLUSTER)
    assert [(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in pods] == \
        [(12000, 16384, 1, 1000), (6000, 12288, 1, 460), (88000, 327680, 8, 1000), (20000, 65536, 0, 0)]
    assert all(p.models is None for p in pods)


def test_a_list_with_gpu_spec_still_restricts_models(tmp_path):
    path = write(tmp_path, SPEC_HEADER, ["p0,4000,1024,1,500,T4|V100M32,LS", "p1,4000,1024,2,1000,,BE",
                                         "p2,4000,1024,0,0,T4,BE"])
    mask, anyone, cpu_only = (p.models for p in load_pods(path, CLUSTER))
    assert mask.tolist() == [False, True, True]
    assert anyone is None and cpu_only is None                          # empty spec; no GPU asked


@pytest.mark.parametrize(("row", "problem"), [
    ("p9,-4000,1024,1,500", "cpu_milli='-4000'"),
    ("p9,4000,lots,1,500", "memory_mib='lots'"),
    ("p9,4000,1024,1.5,500", "num_gpu='1.5'"),
    ("p9,4000,1024,9,1000", "num_gpu='9': expected a whole number in 0..8"),
    ("p9,4000,1024,1,1001", "gpu_milli='1001': expected a whole number in 0..1000"),
    ("p9,4000,1024,1,-5", "gpu_milli='-5'"),
    ("p9,4000,1024,1,", "gpu_milli=''"),
    ("p9,4000,1024,1", "expected 5 fields"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path, row, problem):
    path = write(tmp_path, MULTIGPU_HEADER, ["p0,4000,1024,1,500", "", row, "p1,4000,1024,1,500"])
    with pytest.raises(TraceFormatError, match=re.escape(f"{path}:4: {problem}")) as err:   # the blank line counts
        load_pods(path, CLUSTER)
    assert err.value.line == 4


def test_a_list_without_a_required_column_is_refused(tmp_path):
    path = write(tmp_path, "name,cpu_milli,num_gpu,gpu_milli", ["p0,4000,1,500"])
    with pytest.raises(TraceFormatError, match=r":1: missing columns \['memory_mib'\]"):
        load_pods(path, CLUSTER)


@pytest.mark.skipif(not FGD.is_dir(), reason="shared data not present")
@pytest.mark.parametrize("name", sorted(p.name for p in FGD.glob("openb_pod_list_*.csv")) if FGD.is_dir() else [])
def test_every_shipped_pod_list_loads_one_pod_per_data_row(name):
    path = FGD / name
    rows = path.read_text().splitlines()
    pods = load_pods(path, CLUSTER)
    assert len(pods) == len(rows) - 1
    if "gpu_spec" not in rows[0].split(","):                          # the multigpu* lists
        assert all(p.models is None for p in pods)
