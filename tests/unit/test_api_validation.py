import os

import pytest

import trident
from trident.config import AutoscaleConfig
from trident.errors import ConfigError, TridentError
from trident.ray_data import session


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
    from trident.config import valid_policy_names

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
