"""Environment switches that are on or off."""

from __future__ import annotations

from collections.abc import Mapping


def flag(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    """Variable `name` as "0" or "1" (unset: `default`); InputError for anything else."""
    value = env.get(name, "1" if default else "0").strip()
    if value not in ("0", "1"):
        from ..errors import InputError

        raise InputError(f"{name}={value!r}: expected 0 or 1")
    return value == "1"
