"""Trace loaders: shipped samples, format fixtures, malformed rows."""
from pathlib import Path

import pytest

from trident.core.errors import ConfigError, TraceFormatError
from trident.sim.traces import (load_alibaba_2023, load_helios, load_pai_2020, load_philly, load_trace, resample,
                                scale_cluster, scale_load, shipped_path)

FIX = Path(__file__).parent / "fixtures"


def test_alibaba_sample_fractions_models_and_exclusions():
    t = load_trace("alibaba-2023")
    assert len(t.nodes) == 1523 and sum(n.num_gpus for n in t.nodes) == 6212
    assert t.excluded == {"cpu_only": 713, "never_scheduled": 405}
    assert len(t.jobs) == 4891 - 713 - 405
    assert any(0 < j.num_gpus < 1 for j in t.jobs)
    assert any(j.gpu_models == ("V100M16", "V100M32") for j in t.jobs)
    assert t.jobs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(t.jobs, t.jobs[1:]))


def test_gavel_sample_uses_throughputs_for_duration_and_speed():
    t = load_trace("philly-gavel")
    assert len(t.jobs) == 533 and sum(n.num_gpus for n in t.nodes) == 108
    j = t.jobs[0]
    assert j.speed_by_model["v100"] == 1.0 and set(j.gpu_models) == {"k80", "p100", "v100"}
    assert any(j.speed_by_model["k80"] < 1.0 for j in t.jobs)


@pytest.mark.parametrize("kind, jobs, gpus", [("pollux", 160, 64), ("tiresias", 60, 64)])
def test_other_shipped_samples(kind, jobs, gpus):
    t = load_trace(kind)
    assert len(t.jobs) == jobs and sum(n.num_gpus for n in t.nodes) == gpus


def test_philly_cluster_job_log_fixture():
    t = load_philly(FIX / "philly_cluster_job_log.json")
    assert [j.num_gpus for j in t.jobs] == [4.0, 1.0, 16.0]
    assert [j.duration_s for j in t.jobs] == [3600.0, 1800.0, 7200.0]
    assert [j.arrival_s for j in t.jobs] == [0.0, 600.0, 1800.0]
    assert t.excluded == {"no_gpus": 1}
    assert {n.node_id: n.num_gpus for n in t.nodes} == {"m10": 8, "m11": 8}


def test_helios_fixture():
    t = load_helios(FIX / "helios_cluster_log.csv")
    assert [j.job_id for j in t.jobs] == ["2023185", "2023186", "2023188"]
    assert t.excluded == {"cpu_only": 1, "no_run_time": 1}
    assert t.jobs[2].num_gpus == 16 and t.jobs[2].vc == "vcHvQ"


def test_pai_2020_fixture():
    t = load_pai_2020(FIX / "pai-2020")
    by_id = {j.job_id[:4]: j for j in t.jobs}
    assert set(by_id) == {"6a3d", "7c1b", "9e3d"}
    assert by_id["6a3d"].num_gpus == 0.5 and by_id["6a3d"].gpu_models == ("T4",)
    assert by_id["9e3d"].num_gpus == 4.0 and by_id["9e3d"].gpu_models == ()
    assert by_id["9e3d"].duration_s == 7180.0
    assert t.excluded == {"cpu_only": 1}
    assert sum(n.num_gpus for n in t.nodes) == 18


def _corrupt(tmp_path, src: Path, line: int, text: str) -> Path:
    lines = src.read_text().splitlines()
    lines[line - 1] = text
    out = tmp_path / src.name
    out.write_text("\n".join(lines) + "\n")
    return out


def test_malformed_row_names_file_and_line_or_is_skipped_and_counted(tmp_path):
    bad = _corrupt(tmp_path, FIX / "helios_cluster_log.csv", 3, "2023186,ueb5d,vc6YE,one,6,1,FAILED,"
                   "2020-04-01 00:05:00,2020-04-01 00:05:00,2020-04-01 00:05:30,30,0")
    with pytest.raises(TraceFormatError) as exc:
        load_helios(bad)
    assert exc.value.line == 3 and exc.value.path == str(bad) and "gpu_num" in str(exc.value)
    t = load_helios(bad, skip_bad=True)
    assert t.skipped_rows == 1 and len(t.jobs) == 2


def test_malformed_rows_in_alibaba_pai_and_philly(tmp_path):
    pods = shipped_path("alibaba-2023") / "pods.csv"
    (tmp_path / "nodes.csv").write_text((shipped_path("alibaba-2023") / "nodes.csv").read_text())
    lines = pods.read_text().splitlines()[:50]
    lines[9] = lines[9].rsplit(",", 1)[0]  # a field short
    (tmp_path / "pods.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"pods.csv:10: expected 11 fields"):
        load_alibaba_2023(tmp_path)
    assert load_alibaba_2023(tmp_path, skip_bad=True).skipped_rows == 1

    pai = tmp_path / "pai"
    pai.mkdir()
    for f in (FIX / "pai-2020").iterdir():
        (pai / f.name).write_text(f.read_text())
    _corrupt(pai, FIX / "pai-2020" / "pai_task_table.csv", 2,
             "7c1b2c5e2a1d4f1e9b2c3d4e,tensorflow,1,Terminated,soon,5000700,400,20.0,100,V100")
    with pytest.raises(TraceFormatError, match=r"pai_task_table.csv:2: start_time='soon'"):
        load_pai_2020(pai)

    philly = tmp_path / "philly.json"
    philly.write_text('[{"jobid": "x", "submitted_time": "yesterday", "attempts": []}]')
    with pytest.raises(TraceFormatError, match=r"philly.json:1: time 'yesterday'"):
        load_philly(philly)
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(TraceFormatError, match="invalid JSON"):
        load_philly(tmp_path / "broken.json")


def test_trace_spec_errors_name_the_valid_kinds():
    with pytest.raises(ConfigError, match="alibaba-2023"):
        load_trace("borg:/x")
    with pytest.raises(ConfigError, match="no sample ships"):
        load_trace("helios")


def test_load_scaling_resampling_and_cluster_scaling():
    t = load_trace("tiresias")
    fast = scale_load(t.jobs, 2.0)
    assert fast[-1].arrival_s == t.jobs[-1].arrival_s / 2
    a, b = resample(t, 500, seed=1), resample(t, 500, seed=1)
    assert [j.duration_s for j in a] == [j.duration_s for j in b] and len({j.job_id for j in a}) == 500
    assert [j.duration_s for j in a] != [j.duration_s for j in resample(t, 500, seed=2)]
    ali = load_trace("alibaba-2023")
    small = scale_cluster(ali.nodes, 0.1)
    assert {n.gpu_model for n in small} == {n.gpu_model for n in ali.nodes if n.num_gpus}
    assert 0 < sum(n.num_gpus for n in small) < 0.2 * 6212


def test_a_missing_trace_is_named_as_missing(tmp_path):
    for kind in ("alibaba-2023", "philly-gavel", "pollux", "tiresias", "philly", "helios", "pai-2020"):
        with pytest.raises(TraceFormatError, match=r"nonexistent:0: trace (file|folder) not found"):
            load_trace(f"{kind}:{tmp_path / 'nonexistent'}")


def test_gavel_needs_data_must_be_0_or_1(tmp_path):
    src = shipped_path("philly-gavel")
    (tmp_path / "simulation_throughputs.json").write_text((src.parent / "simulation_throughputs.json").read_text())
    fields = src.read_text().splitlines()[2].split("\t")
    fields[3] = "X"
    bad = _corrupt(tmp_path, src, 3, "\t".join(fields))
    with pytest.raises(TraceFormatError, match=r"2869ce.csv:3: needs_data='X' is not 0 or 1"):
        load_trace(f"philly-gavel:{bad}")


FGD = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces" / "alibaba-gpu-2023" / "fgd"
NODE_ROWS = ["sn,cpu_milli,memory_mib,gpu,model", "n0,96000,393216,8,V100M32", "n1,64000,262144,2,T4"]
TIMED_NO_SPEC = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def _fgd_folder(tmp_path, pod_rows, node_list="openb_node_list_gpu_node.csv"):
    (tmp_path / node_list).write_text("\n".join(NODE_ROWS) + "\n")
    pods = tmp_path / "openb_pod_list_test.csv"
    pods.write_text("\n".join(pod_rows) + "\n")
    return pods


def test_a_pod_list_without_gpu_spec_loads_with_no_model_constraint(tmp_path):
    pods = _fgd_folder(tmp_path, [TIMED_NO_SPEC, "p0,12000,16384,1,1000,LS,Running,10,110,20",
                                  "p1,6000,12288,1,460,BE,Succeeded,30,90,40", "p2,20000,65536,0,0,BE,Running,5,50,6",
                                  "p3,88000,327680,8,1000,Burstable,Running,40,400,100"])
    t = load_alibaba_2023(pods)                                   # FGD's node list beside, no nodes.csv
    assert [(n.node_id, n.gpu_model, n.num_gpus) for n in t.nodes] == [("n0", "V100M32", 8), ("n1", "T4", 2)]
    assert [(j.job_id, j.arrival_s, j.duration_s, j.num_gpus, j.gpu_models) for j in t.jobs] == [
        ("p0", 0.0, 90.0, 1.0, ()), ("p1", 20.0, 50.0, 0.46, ()), ("p3", 30.0, 300.0, 8.0, ())]
    assert t.excluded == {"cpu_only": 1}


def test_a_bad_row_of_a_list_without_gpu_spec_is_named_by_line(tmp_path):
    rows = [TIMED_NO_SPEC, "p0,12000,16384,1,1000,LS,Running,10,110,20", "",   # the blank line counts
            "p1,6000,12288,1,1460,BE,Running,30,90,40", "p2,6000,12288,1,500,BE,Running,30,90,40"]
    pods = _fgd_folder(tmp_path, rows, node_list="nodes.csv")
    with pytest.raises(TraceFormatError, match=r"openb_pod_list_test.csv:4: gpu_milli='1460' is not in") as err:
        load_alibaba_2023(pods)
    assert err.value.line == 4 and err.value.path == str(pods)
    assert load_alibaba_2023(pods, skip_bad=True).skipped_rows == 1


def test_a_multigpu_list_has_no_times_to_replay_and_is_refused_naming_them(tmp_path):
    pods = _fgd_folder(tmp_path, ["name,cpu_milli,memory_mib,num_gpu,gpu_milli", "p0,12000,16384,1,1000"])
    with pytest.raises(TraceFormatError, match=r":1: missing columns \['qos', 'pod_phase', 'creation_time', "
                                               r"'deletion_time', 'scheduled_time'\]"):
        load_alibaba_2023(pods)


@pytest.mark.skipif(not FGD.is_dir(), reason="shared data not present")
def test_every_shipped_fgd_pod_list_replays():
    for path in sorted(FGD.glob("openb_pod_list_*.csv")):
        t = load_alibaba_2023(path)
        assert len(t.nodes) == 1213 and len(t.jobs) + sum(t.excluded.values()) == len(path.read_text().splitlines()) - 1
