"""Unit tests of the pure core: no Ray, no sleeping (enforced)."""
import sys
import time

import pytest


@pytest.fixture(autouse=True)
def _forbid_ray_and_sleep(monkeypatch):
    def _no_sleep(*_a, **_k):
        raise AssertionError("unit tests must not sleep")

    monkeypatch.setattr(time, "sleep", _no_sleep)
    ray = sys.modules.get("ray")
    if ray is not None:
        def _no_init(*_a, **_k):
            raise AssertionError("unit tests must not start Ray")

        monkeypatch.setattr(ray, "init", _no_init)
    yield
