import pytest

from trident.core.errors import ConfigError, TridentError, UnknownNameError
from trident.core.registry import Registry
from trident.core.types import OperatorConfig, OperatorTarget
from trident.core.units import parse_memory_bytes


def test_parse_memory_units():
    assert parse_memory_bytes("16GiB") == 16 * 2**30
    assert parse_memory_bytes("512 MB") == 512 * 10**6
    assert parse_memory_bytes(1024) == 1024
    assert parse_memory_bytes(None) is None


@pytest.mark.parametrize("bad", ["lots", "-3GiB", "12 parsecs", 0, -1, True, [1]])
def test_parse_memory_rejects_bad_input_naming_parameter(bad):
    with pytest.raises(ConfigError, match="memory_limit"):
        parse_memory_bytes(bad)


def test_registry_rejects_duplicates_and_lists_names():
    reg: Registry[int] = Registry("widget")
    reg.register("a", lambda: 1)
    with pytest.raises(TridentError, match="already registered"):
        reg.register("a", lambda: 2)
    with pytest.raises(UnknownNameError, match="valid widgets: a"):
        reg.get("b")
    assert reg.create("a") == 1


def test_types_validate():
    with pytest.raises(ConfigError, match="batch_size"):
        OperatorConfig(kind="actor", replicas=1, batch_size=0)
    with pytest.raises(ConfigError, match="op.replicas"):
        OperatorTarget(name="op", replicas=-1)
    assert OperatorTarget(name="op", batch_size=32).needs_rollout
    assert not OperatorTarget(name="op", replicas=3).needs_rollout


def test_trident_errors_survive_pickling_whatever_the_value():
    import pickle

    from trident.core.errors import ConfigError, TraceFormatError, UnknownNameError

    class Local:  # not importable: cannot be pickled by reference
        pass

    for err in (ConfigError("policy", Local(), "a policy with step"), TraceFormatError("/x.csv", 3, "bad"),
                UnknownNameError("policy", "nope", ["fifo"])):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
    back = pickle.loads(pickle.dumps(ConfigError("seed", -1, "an integer >= 0")))
    assert (back.parameter, back.value, back.valid) == ("seed", -1, "an integer >= 0")
