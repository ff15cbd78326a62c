import os

import pytest

import trident
from trident.autoscaler.config import AutoscaleConfig
from trident.core.errors import ConfigError, TridentError
from trident.core.policy import PolicyContext
from trident.autoscaler.shim import session


def test_unknown_policy_names_the_parameter_and_lists_valid_ones():
    with pytest.raises(ConfigError) as info:
        trident.autoscale(policy="nope")
    msg = str(info.value)
    assert "policy='nope'" in msg and "'ds2'" in msg and "'ray'" in msg and "'static'" in msg
    assert info.value.parameter == "policy"


def test_default_policy_is_trident_and_never_silently_replaced():
    assert AutoscaleConfig.__dataclass_fields__["policy"].default == "trident"
    if _registered("trident"):
        assert trident.autoscale().config.policy == "trident"
    else:
        with pytest.raises(ConfigError, match="policy='trident'"):
            trident.autoscale()


def _registered(name):
    from trident.autoscaler.config import valid_policy_names

    return name in valid_policy_names()


@pytest.mark.parametrize("bad", ["lots", "12 parsecs", -1, 0, "-3GiB"])
def test_unparsable_memory_limit(bad):
    with pytest.raises(ConfigError, match="memory_limit") as info:
        trident.autoscale(policy="ray", memory_limit=bad)
    assert "GiB" in info.value.valid


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True, None])
def test_interval_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match="interval_s") as info:
        trident.autoscale(policy="ray", interval_s=bad)
    assert "positive" in info.value.valid


@pytest.mark.parametrize("kwargs,parameter", [({"dry_run": "yes"}, "dry_run"), ({"seed": -1}, "seed"),
                                              ({"log_dir": 3}, "log_dir"), ({"controller_timeout_s": 0},
                                                                             "controller_timeout_s")])
def test_other_parameters_validate(kwargs, parameter):
    with pytest.raises(ConfigError, match=parameter):
        trident.autoscale(policy="ray", **kwargs)


def test_errors_are_trident_errors():
    with pytest.raises(TridentError):
        trident.autoscale(policy="ray", memory_limit="much")


def test_valid_config_is_frozen_and_parsed():
    run = trident.autoscale(policy="ds2", memory_limit="2GiB", interval_s=0.5, seed=3)
    assert run.config.memory_limit_bytes == 2 * 2**30
    assert run.config.policy_name == "ds2"
    with pytest.raises(Exception):
        run.config.interval_s = 2.0


def test_policy_factory_is_accepted_by_name_attribute():
    class Mine:
        name = "mine"

        def __init__(self, *, context=None):
            pass

    assert trident.autoscale(policy=Mine).config.policy_name == "mine"


def test_callback_registration_follows_nested_and_repeated_blocks(monkeypatch):
    monkeypatch.setenv(session.ENV_VAR, "user.pkg.Callback")
    outer = trident.autoscale(policy="ray")
    inner = trident.autoscale(policy="static")
    with outer:
        assert os.environ[session.ENV_VAR] == f"user.pkg.Callback,{session.CALLBACK_PATH}"
        assert session.current_run() is outer
        with inner:
            assert session.current_run() is inner
            assert os.environ[session.ENV_VAR].count(session.CALLBACK_PATH) == 1
        assert session.current_run() is outer
    assert os.environ[session.ENV_VAR] == "user.pkg.Callback"
    assert session.current_run() is None
    with outer:  # a run may be entered again
        assert session.current_run() is outer
    assert session.active_runs() == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 0.5, "9" * 400 + "TB"])
def test_memory_limit_that_is_not_a_finite_byte_count(bad):
    with pytest.raises(ConfigError, match="memory_limit"):
        trident.autoscale(policy="ray", memory_limit=bad)


@pytest.mark.parametrize("kwargs", [{"controller_timeout_s": float("nan")}, {"controller_timeout_s": float("inf")},
                                    {"interval_s": 1e-9}, {"interval_s": 0.049}])
def test_timings_that_cannot_work_are_refused(kwargs):
    (parameter,) = kwargs
    with pytest.raises(ConfigError, match=parameter):
        trident.autoscale(policy="ray", **kwargs)
    assert trident.autoscale(policy="ray", interval_s=0.05).config.interval_s == 0.05


def test_log_dir_is_checked_before_any_work(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for bad, why in [("", "non-empty"), ("   ", "non-empty"), (str(a_file), "it is a file"),
                     (str(a_file / "below"), "Not a directory"), ("/proc/trident-logs", "")]:
        with pytest.raises(ConfigError, match="log_dir") as info:
            trident.autoscale(policy="ray", log_dir=bad)
        assert why in str(info.value)
    fresh = tmp_path / "new" / "logs"
    assert trident.autoscale(policy="ray", log_dir=str(fresh)).config.log_dir == str(fresh)
    assert fresh.is_dir()  # created when autoscale() is called


def test_an_error_writing_logs_never_replaces_the_users_exception(tmp_path, monkeypatch):
    from trident.autoscaler.api import Run

    def broken(self, log_dir):
        raise FileExistsError(log_dir)

    monkeypatch.setattr(Run, "_write_log_dir", broken)
    run = trident.autoscale(policy="ray", log_dir=str(tmp_path))
    with pytest.warns(session.TridentRuntimeWarning, match="writing the run's logs"):
        with pytest.raises(KeyError, match="the user's own"):
            with run:
                raise KeyError("the user's own")
    assert any("FileExistsError" in w for w in run.record.warnings)
    with pytest.warns(session.TridentRuntimeWarning):  # without an exception in flight: a warning, no raise
        with trident.autoscale(policy="ray", log_dir=str(tmp_path)):
            pass


def test_logs_are_written_when_the_block_ends(tmp_path):
    with trident.autoscale(policy="ray", log_dir=str(tmp_path / "logs")):
        pass
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["trident-run.json", "trident-run.png",
                                                                    "trident-run.txt"]


def test_a_policy_without_step_is_named_plainly():
    from trident.autoscaler.controller.actor import describe_failure
    from trident.autoscaler.controller.loop import ControlLoop

    class NoStep:
        pass

    with pytest.raises(ConfigError, match=r"step\(snapshot, now\).*NoStep without one") as info:
        ControlLoop(policy=NoStep())

    class RemoteWrapper(Exception):  # how Ray hands back an error raised inside the controller actor
        def __init__(self, cause):
            super().__init__("\x1b[36mray::Controller.step()\x1b[39m (pid=1)\n  traceback ...")
            self.cause = cause

    line = describe_failure(RemoteWrapper(info.value))
    assert line.startswith("ConfigError: policy=") and "step(snapshot, now)" in line
    assert "\x1b" not in line and "\n" not in line
    assert describe_failure(RuntimeError("actor died\nmore")) == "RuntimeError: actor died"


@pytest.mark.parametrize("bad", ["node", "", None, 1])
def test_memory_scope_is_ray_or_workers(bad):
    with pytest.raises(ConfigError, match="memory_scope"):
        trident.autoscale(memory_limit="1GiB", memory_scope=bad)
    assert AutoscaleConfig.from_user(memory_limit="1GiB", memory_scope="workers").memory_scope == "workers"
    with pytest.raises(ConfigError, match="memory_scope"):
        PolicyContext(memory_limit_bytes=2**30, memory_scope=bad)
