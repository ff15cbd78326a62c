"""The ``trident`` command line: every bad input is one line on stderr and exit status 2,
before Ray starts or any work begins (the unit-test guard fails any test that starts Ray)."""
import re

import pytest

from trident.cli import SUBCOMMANDS, main


def _run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own exit
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv,says", [
    (["simulate", "--trace", "tiresias", "--seed", "-1"], "argument --seed: '-1' is not an integer >= 0"),
    (["simulate", "--jobs", "-5"], "argument --jobs: '-5' is not an integer >= 0"),
    (["simulate", "--restore-s", "-10"], "argument --restore-s: '-10' is not a finite number >= 0"),
    (["simulate", "--load", "inf"], "argument --load: 'inf' is not a finite number > 0"),
    (["simulate", "--load", "nan"], "argument --load: 'nan' is not a finite number > 0"),
    (["simulate", "--cluster-fraction", "1.5"], "argument --cluster-fraction: '1.5' is not a finite number > 0 and <= 1"),
    (["simulate", "--setup-median-s", "2000"], "--setup-median-s/--setup-p95-s=(2000.0, 1500.0) is not valid"),
    (["simulate", "--trace", "tiresias", "--compare", "fifo", "--out", "/proc/x"], "--out='/proc/x' is not valid"),
    (["simulate", "--trace", "philly-gavel:/nonexistent"], "/nonexistent:0: trace file not found"),
    (["simulate", "--compare", "fifo,,nope"], "--compare='fifo,,nope' is not valid; expected comma-separated"),
    (["simulate", "--compare", "fifo,nope"], "unknown job policy 'nope'"),
    (["simulate", "--policy", "fifo", "--preemption", "sometimes"], "unknown preemptor 'sometimes'"),
    (["simulate", "--trace", "borg"], "kind:PATH"),
    (["demo", "pdf", "--memory-limit", "12XB"], "argument --memory-limit: '12XB' is not"),
    (["demo", "pdf", "--policy", "nope"], "argument --policy: 'nope' is not one of"),
    (["demo", "pdf", "--cpus", "0"], "argument --cpus: '0' is not an integer >= 3"),
    (["demo", "pdf", "--cpus", "2"], "argument --cpus: '2' is not an integer >= 3"),
    (["demo", "video", "--size", "0"], "argument --size: '0' is not an integer >= 1"),
])
def test_a_bad_input_is_one_line_and_exit_status_2(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written; a default output folder would land here
    rc, out, err = _run(argv, capsys)
    assert rc == 2
    assert says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert out == ""  # no work started
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_as_output_folder_is_refused_up_front(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    for argv in (["simulate", "--trace", "tiresias", "--out", str(a_file)], ["demo", "pdf", "--out", str(a_file)]):
        rc, out, err = _run(argv, capsys)
        assert rc == 2 and "--out=" in err and "it is a file" in err and out == "", err


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_help_has_a_description_and_the_defaults(command, capsys):
    rc, out, _ = _run([command, "--help"], capsys)
    assert rc == 0
    description = out.split("\n\n")[1]
    assert len(description.split()) >= 5, out
    options = [line for line in out.splitlines() if line.strip().startswith("--") and "--help" not in line]
    taking_values = [o for o in options if re.match(r"\s+--[\w-]+ [A-Z_]+", o)]  # flags have no default to show
    assert options and "(default:" in out
    assert out.count("(default:") >= len(taking_values) - 2, out


def test_simulate_writes_where_out_says_and_prints_the_paths(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(["simulate", "--trace", "tiresias", "--no-progress"], capsys)
    assert rc == 0, err
    written = sorted(p.name for p in (tmp_path / "trident-results").iterdir())
    assert written == ["simulate-tiresias-load1-seed0.json", "simulate-tiresias-load1-seed0.png"]
    assert f"wrote trident-results/{written[0]} and trident-results/{written[1]}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trident-results"]
    assert "HiGHS" not in out + err and "Copyright" not in out + err
