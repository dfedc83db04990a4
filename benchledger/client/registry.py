"""Named variants of a strategy, in the style of guidellm's registries: each variant is a
class that says its name and registers itself, and the arm's typed value picks one, once."""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar


class Variant:
    """One variant of a strategy. Variants keep no state (what a request or a window keeps
    lives in objects they make), so each is registered as one shared instance."""

    name: ClassVar[str]  # the value of the sweep key that picks it

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


V = TypeVar("V", bound=Variant)


class Registry(Generic[V]):
    """The variants of one strategy by name."""

    def __init__(self, strategy: str) -> None:
        self._strategy = strategy
        self._variants: dict[str, V] = {}

    def register(self, cls: type[V]) -> type[V]:
        """Class decorator: the variant's one instance, under its name."""
        if cls.name in self._variants:
            raise ValueError(f"two {self._strategy} variants named {cls.name!r}")
        self._variants[cls.name] = cls()
        return cls

    def __getitem__(self, name: str) -> V:
        try:
            return self._variants[name]
        except KeyError:
            raise ValueError(f"no {self._strategy} named {name!r} (known: "
                             f"{', '.join(self._variants)})") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._variants)
