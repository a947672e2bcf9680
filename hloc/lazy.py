"""Lazy package exports (PEP 562): a package names where each export lives and imports that
module on first use, so importing the package costs a start-up nothing it does not use."""

from __future__ import annotations

from collections.abc import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, str], namespace: dict) -> Callable:
    """A module `__getattr__` for `package`: export NAME comes from submodule homes[NAME],
    imported on first use and then kept in the package's `namespace` (its globals())."""

    def __getattr__(name: str):
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
        namespace[name] = value
        return value

    return __getattr__
