"""The history store: lessons kept and read back, bounded, a schema of its own, and every fault
(corrupt, unwritable, two writers at once) a :class:`HistoryUnavailable` or a repair, never a crash."""
import argparse
import multiprocessing
import sqlite3

import pytest

from trident.autoscaler.config import AutoscaleConfig
from trident.core.errors import ConfigError
from trident.core.model.prior import OperatorPrior, RegimePrior
from trident.history import cli as history_cli
from trident.history import store as store_mod
from trident.history.store import KEEP_RUNS, HistoryStore, HistoryUnavailable


def _lesson(name, run, rate):
    return OperatorPrior(name=name, run=run, cold_start_s=3.5, selectivity=0.5, regimes=(
        RegimePrior(rates=(((16, "gpu", 0.5), (rate, rate * 1.1)),), typed=(("A", rate * 2),),
                    heap=(((16, "gpu", 0.5), 2.0e9),), bytes_per_row=120.0),))


def test_lessons_come_back_as_priors_newest_run_first(tmp_path):
    st = HistoryStore(tmp_path / "h.sqlite")
    keys = {"ocr": "k-ocr", "embed": "k-embed"}
    assert st.priors(keys) == {}
    st.add({"ocr": _lesson("ocr", "r1", 10.0), "embed": _lesson("embed", "r1", 50.0)}, keys, pipeline="p", at_unix_s=1)
    st.add({"ocr": _lesson("ocr", "r2", 20.0)}, keys, pipeline="p", at_unix_s=2)
    priors = st.priors(keys)
    assert priors["ocr"].run == "r2" and priors["ocr"].runs == 2
    assert [r.rate((16, "gpu", 0.5)) for r in priors["ocr"].regimes] == [pytest.approx(21.0), pytest.approx(10.5)]
    assert priors["ocr"].regimes[0].typed == (("A", 40.0),) and priors["ocr"].regimes[0].heap_of((16, "gpu", 0.5)) == 2e9
    assert priors["embed"].run == "r1" and priors["embed"].cold_start_s == 3.5 and priors["embed"].selectivity == 0.5
    assert st.priors({"ocr": "another-key"}) == {}  # changed code or cluster: nothing known


def test_the_store_stays_bounded(tmp_path, monkeypatch):
    st = HistoryStore(tmp_path / "h.sqlite")
    for i in range(KEEP_RUNS + 3):
        st.add({"ocr": _lesson("ocr", f"r{i}", 10.0 + i)}, {"ocr": "k"}, pipeline="p", at_unix_s=i)
    runs = [e.run for e in st.entries()]
    assert runs == [f"r{i}" for i in range(KEEP_RUNS + 2, 2, -1)]  # the newest KEEP_RUNS
    monkeypatch.setattr(store_mod, "KEEP_ROWS", 3)
    st.add({"a": _lesson("a", "x", 1.0)}, {"a": "ka"}, pipeline="p", at_unix_s=100)
    assert len(st.entries()) == 3


def test_a_corrupt_file_is_unavailable_to_read_and_replaced_by_the_next_write(tmp_path):
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"this is not a database" * 200)
    st = HistoryStore(path)
    with pytest.raises(HistoryUnavailable, match="h.sqlite"):
        st.priors({"ocr": "k"})
    assert st.add({"ocr": _lesson("ocr", "r1", 10.0)}, {"ocr": "k"}, pipeline="p") == 1
    assert st.priors({"ocr": "k"})["ocr"].run == "r1"
    assert list(tmp_path.glob("h.sqlite.corrupt-*"))  # kept aside, not deleted


def test_a_folder_that_cannot_be_written_is_unavailable(tmp_path):
    (tmp_path / "a-file").write_text("x")
    st = HistoryStore(tmp_path / "a-file" / "h.sqlite")
    with pytest.raises(HistoryUnavailable):
        st.add({"ocr": _lesson("ocr", "r1", 10.0)}, {"ocr": "k"}, pipeline="p")
    with pytest.raises(HistoryUnavailable):
        st.priors({"ocr": "k"})


def test_a_store_of_another_schema_starts_anew(tmp_path):
    path = tmp_path / "h.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE lessons (x)")
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    st = HistoryStore(path)
    assert st.entries() == []
    st.add({"ocr": _lesson("ocr", "r1", 10.0)}, {"ocr": "k"}, pipeline="p")
    assert [e.run for e in st.entries()] == ["r1"]


def _writer(path, who, n):
    st = HistoryStore(path, timeout_s=30.0)
    for i in range(n):
        st.add({"op": _lesson("op", f"{who}-{i}", 1.0 + i)}, {"op": f"{who}-{i}"}, pipeline=who)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "h.sqlite"
    HistoryStore(path).entries()  # created once: the two writers race on rows, not on the schema
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 25)) for w in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    runs = {e.run for e in HistoryStore(path).entries()}
    assert runs == {f"{w}-{i}" for w in ("a", "b") for i in range(25)}


def test_where_the_history_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIDENT_HISTORY", str(tmp_path / "env.sqlite"))
    assert AutoscaleConfig().history_path == tmp_path / "env.sqlite"
    assert AutoscaleConfig(history=str(tmp_path / "mine.sqlite")).history_path == tmp_path / "mine.sqlite"
    assert AutoscaleConfig.from_user(history=tmp_path / "p.sqlite").history_path == tmp_path / "p.sqlite"
    assert AutoscaleConfig(history=False).history_path is None
    monkeypatch.setenv("TRIDENT_HISTORY", "off")
    assert AutoscaleConfig().history_path is None
    monkeypatch.delenv("TRIDENT_HISTORY")
    assert AutoscaleConfig().history_path.name == "history.sqlite"
    for bad in ("", "  ", 3, None):
        with pytest.raises(ConfigError, match="history"):
            AutoscaleConfig(history=bad)


def test_the_history_command_lists_shows_forgets_and_clears(tmp_path, capsys):
    path = tmp_path / "h.sqlite"
    st = HistoryStore(path)
    st.add({"MapBatches(Ocr)": _lesson("MapBatches(Ocr)", "r1", 10.0), "ReadFiles": _lesson("ReadFiles", "r1", 99.0)},
           {"MapBatches(Ocr)": "k1", "ReadFiles": "k2"}, pipeline="ReadFiles -> MapBatches(Ocr)")

    def run(action, name=None):
        rc = history_cli.main(argparse.Namespace(action=action, name=name, path=str(path)))
        return rc, capsys.readouterr().out

    rc, out = run("list")
    assert rc == 0 and "2 operators" in out and "MapBatches(Ocr)  [k1]  1 run(s)" in out
    rc, out = run("show", "Ocr")
    assert "regime 1: gpu x0.5 GPU batch 16 10.5" in out and "on A 20" in out and "cold start 3.5 s" in out
    assert "ReadFiles" not in out.split("pipeline:")[0]
    assert run("forget", "MapBatches(Ocr)")[1].startswith("1 lessons")
    assert "nothing kept" in run("show", "Ocr")[1]
    assert run("clear")[1].startswith("1 lessons")
    with pytest.raises(ConfigError):
        run("show")
