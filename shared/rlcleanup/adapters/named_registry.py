"""What every registry of named adapter kinds shares (job-state controllers, notification channels): each name once,
listed in name order. What a name builds, and the typed error for a name nobody registered, are each registry's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


K = TypeVar("K", bound=Named)


class NamedRegistry(Generic[K]):
    """Immutable: a deployment or a test extends one by building another from its `kinds`."""

    noun: ClassVar[str]  # what the kinds are, for the refusal ("notification channels")

    def __init__(self, kinds: Iterable[K] = ()) -> None:
        listed = list(kinds)
        names = [kind.name for kind in listed]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"{self.noun} registered twice: {', '.join(repeated)}")
        self._kinds = {kind.name: kind for kind in listed}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._kinds))

    @property
    def kinds(self) -> tuple[K, ...]:
        """Every registered kind, in name order."""
        return tuple(self._kinds[name] for name in self.names)
