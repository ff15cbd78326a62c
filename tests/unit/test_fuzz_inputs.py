"""Property-based fuzz of every trace loader and of ``trident.autoscale``'s arguments: any input
either loads (validates) or raises ``TraceFormatError`` naming file:line / ``ConfigError`` naming
the argument — never another exception."""
import csv
import io
import json
import math
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trident
from trident.core.errors import ConfigError, TraceFormatError
from trident.sim.traces import PAI_JOB_COLUMNS, PAI_MACHINE_COLUMNS, PAI_TASK_COLUMNS, Trace, load_trace

FUZZ = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", 50)), deadline=None, suppress_health_check=[HealthCheck.too_slow])

FIELD = st.one_of(
    st.sampled_from(["", "0", "1", "2", "4", "8", "-1", "0.5", "1000", "1001", "1e309", "nan", "inf", "-inf",
                     "X", "None", "True", "v100", "k80", "T4", "cifar10", "bert", "Transformer (batch size 128)",
                     "2020-04-01 00:05:00", "2020-13-01 00:00:00", "LS", "BE", "Running", "MISC", "V100", "1|T4"]),
    st.integers(-10**6, 10**13).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)


def table(columns, *, header=True, delimiter=","):
    """Delimited text: an optional header, then rows of fuzzed fields (sometimes one too few or many)."""
    row = st.integers(-1, 1).flatmap(lambda extra: st.lists(FIELD, min_size=max(0, len(columns) + extra),
                                                             max_size=max(0, len(columns) + extra)))

    def render(rows):
        out = io.StringIO()
        w = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        if header:
            w.writerow(columns)
        w.writerows(rows)
        return out.getvalue()
    return st.lists(row, max_size=8).map(render)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**13) | st.floats() | st.text(max_size=6)
                    | st.sampled_from(["2020-04-01 00:05:00", "gpu0", "gpu3"]),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["jobid", "submitted_time", "attempts", "start_time", "end_time", "detail",
                                         "ip", "gpus", "user", "vc", "status", "null", "('A3C', 1)", "(1", "v100",
                                         "k80", "p100"]) | st.text(max_size=4), inner, max_size=5),
                    max_leaves=20)

GAVEL_COLUMNS = ("job_type", "command", "steps_arg", "needs_data", "total_steps", "arrival_time", "scale_factor")
KINDS = {
    "alibaba-2023": {"pods.csv": table(("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                                        "pod_phase", "creation_time", "deletion_time", "scheduled_time")),
                     "nodes.csv": table(("sn", "cpu_milli", "memory_mib", "gpu", "model"))},
    "philly-gavel": {"trace.csv": table(GAVEL_COLUMNS, header=False, delimiter="\t"),
                     "simulation_throughputs.json": JSON.map(json.dumps)},
    "pollux": {"workload.csv": table(("name", "time", "application", "num_replicas", "batch_size"))},
    "tiresias": {"jobs.csv": table(("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration",
                                    "interval")),
                 "cluster_spec.csv": table(("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node",
                                            "mem_p_node"))},
    "philly": {"log.json": JSON.map(json.dumps)},
    "helios": {"log.csv": table(("job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state", "submit_time",
                                 "start_time", "end_time", "duration"))},
    "pai-2020": {"pai_job_table.csv": table(PAI_JOB_COLUMNS, header=False),
                 "pai_task_table.csv": table(PAI_TASK_COLUMNS, header=False),
                 "pai_machine_spec.csv": table(PAI_MACHINE_COLUMNS, header=False)},
}
TRACE_ARG = {"alibaba-2023": "pods.csv", "philly-gavel": "trace.csv", "pollux": "workload.csv",
             "tiresias": "jobs.csv", "philly": "log.json", "helios": "log.csv", "pai-2020": "."}


def files(kind):
    return st.fixed_dictionaries(KINDS[kind])


def check_loads_or_names_file_and_line(kind, contents, skip_bad):
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in contents.items():
            (Path(tmp) / name).write_text(text)
        path = Path(tmp) / TRACE_ARG[kind]
        try:
            trace = load_trace(f"{kind}:{path}", skip_bad=skip_bad)
        except TraceFormatError as exc:
            assert re.match(rf"{re.escape(tmp)}/[^:]+:\d+: \S", str(exc)), str(exc)
            assert any(exc.path.endswith(n) for n in contents) or exc.path == str(path), exc.path
            return
        assert isinstance(trace, Trace) and trace.jobs
        assert all(math.isfinite(j.arrival_s) and j.duration_s > 0 for j in trace.jobs)


def _fuzz_kind(kind):
    @FUZZ
    @given(contents=files(kind), skip_bad=st.booleans())
    def test(contents, skip_bad):
        check_loads_or_names_file_and_line(kind, contents, skip_bad)
    test.__name__ = f"test_{kind.replace('-', '_')}_loader_loads_or_names_file_and_line"
    return test


for _kind in KINDS:
    globals()[f"test_{_kind.replace('-', '_')}_loader_loads_or_names_file_and_line"] = _fuzz_kind(_kind)


class _Factory:
    name = "fuzz-factory"

    def __init__(self, *, context=None):
        pass


ANY = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                st.text(max_size=10), st.lists(st.integers(), max_size=2), st.just(object()))
ARGS = {
    "policy": st.one_of(ANY, st.sampled_from(["trident", "ds2", "ray", "static", "Trident", ""]), st.just(_Factory)),
    "memory_limit": st.one_of(ANY, st.sampled_from(["16GiB", "512 MB", "1e3GB", "12XB", "-3GiB", "0.5", "inf", "nan",
                                                    "9" * 400 + "TB", " 2 gib "])),
    "interval_s": st.one_of(ANY, st.floats(0, 10)),
    "dry_run": ANY,
    "seed": ANY,
    "controller_timeout_s": st.one_of(ANY, st.floats(0, 1e6)),
    "log_dir": st.one_of(ANY, st.sampled_from(["", " ", "/proc/trident-fuzz", "\0x", "LOGS/run", "A-FILE",
                                               "A-FILE/below"])),
}


@FUZZ
@given(kwargs=st.fixed_dictionaries({}, optional=ARGS))
def test_autoscale_arguments_validate_or_name_the_argument(kwargs):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "A-FILE").write_text("")
        if isinstance(kwargs.get("log_dir"), str) and kwargs["log_dir"].startswith(("LOGS", "A-FILE")):
            kwargs["log_dir"] = str(Path(tmp) / kwargs["log_dir"])
        try:
            run = trident.autoscale(**kwargs)
        except ConfigError as exc:
            assert exc.parameter in kwargs, (exc.parameter, kwargs)
            assert str(exc).startswith(f"{exc.parameter}=")
            return
        config = run.config
        assert config.interval_s >= 0.05 and math.isfinite(config.controller_timeout_s)
        assert config.memory_limit_bytes is None or config.memory_limit_bytes >= 1
        if config.log_dir is not None:
            assert Path(config.log_dir).is_dir()
