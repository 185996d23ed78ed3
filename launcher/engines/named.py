"""A registry of named plug-ins (the engines, the router programs): built-in ones first, in
order, then those registered.

Contract: :meth:`Named.register` refuses a name already taken (``ValueError``);
:meth:`Named.get` raises ``LookupError`` naming the known ones; the order is registration order.
"""

from __future__ import annotations

from typing import Generic, Iterable, Protocol, TypeVar


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=_HasName)


class Named(Generic[T]):
    """``kind``: what the messages call one ("engine", "router program")."""

    def __init__(self, kind: str, builtin: Iterable[T]) -> None:
        self.kind = kind
        self._by_name: dict[str, T] = {p.name: p for p in builtin}

    def register(self, plugin: T) -> None:
        if plugin.name in self._by_name:
            raise ValueError(f"{self.kind} {plugin.name!r} is already registered")
        self._by_name[plugin.name] = plugin

    def unregister(self, name: str) -> None:
        """Drop a registered plug-in (a test's, when the test ends)."""
        del self._by_name[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def all(self) -> tuple[T, ...]:
        return tuple(self._by_name.values())

    def get(self, name: str) -> T:
        try:
            return self._by_name[name]
        except KeyError:
            raise LookupError(f"unknown {self.kind} {name!r}; known: {', '.join(self._by_name)}") from None
