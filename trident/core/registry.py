"""A small name -> factory registry used for every plug-in kind (policies, schedulers, ...)."""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

from trident.core.errors import TridentError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories. Rejects duplicates; lookups of unknown names list the valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str, factory: Callable[..., T] | None = None):
        """Register ``factory`` under ``name``; usable as a decorator when ``factory`` is omitted."""

        def _add(f: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise TridentError(f"{self.kind} {name!r} is already registered")
            self._factories[name] = f
            return f

        return _add(factory) if factory is not None else _add

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._factories[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self._factories)) from None

    def create(self, name: str, **kwargs) -> T:
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, name: str) -> bool:
        return name in self._factories
