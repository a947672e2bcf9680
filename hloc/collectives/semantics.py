"""The pure semantics of each collective, given every participant's value in group order.

These functions know nothing of devices or transports: a communicator gathers the values (or
a transport computes the same result natively), and these say what each participant gets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .reducers import Reducer


def all_reduce(values: Sequence[np.ndarray], reducer: Reducer) -> np.ndarray:
    """Every participant gets the reduction of all values, in participant order."""
    return reducer.fold(values)


def all_gather(values: Sequence[np.ndarray], dim: int) -> np.ndarray:
    """The participants' values concatenated along `dim`, in participant order."""
    return np.concatenate([np.asarray(v) for v in values], axis=dim)


def reduce_scatter(values: Sequence[np.ndarray], reducer: Reducer, dim: int,
                   position: int) -> np.ndarray:
    """The `position`-th of len(values) equal pieces (along `dim`) of the reduction."""
    reduced = reducer.fold(values)
    return np.split(reduced, len(values), axis=dim)[position]


def all_to_all(values: Sequence[np.ndarray], split_dim: int, concat_dim: int,
               position: int) -> np.ndarray:
    """Array form: each participant splits its value into len(values) pieces along split_dim;
    participant i gets piece i of every participant, concatenated along concat_dim."""
    n = len(values)
    pieces = [np.split(np.asarray(v), n, axis=split_dim)[position] for v in values]
    return np.concatenate(pieces, axis=concat_dim)


def all_to_all_tuple(values: Sequence[Sequence[np.ndarray]], position: int) -> tuple:
    """Tuple form: participant j sends its operand i to participant i; result element j is
    what participant j sent here."""
    return tuple(np.asarray(ops[position]) for ops in values)


def collective_permute(values: Sequence[np.ndarray], pairs: Sequence[tuple[int, int]],
                       position: int, like: np.ndarray) -> np.ndarray:
    """values[k] is what index k of the permute's id space sent; a device that is no pair's
    target gets zeros."""
    sources = [s for s, t in pairs if t == position]
    if len(sources) > 1:
        raise ValueError(f"collective-permute: index {position} is the target of {sources}")
    if not sources:
        return np.zeros_like(like)
    return np.array(values[sources[0]], copy=True)


def collective_broadcast(values: Sequence[np.ndarray]) -> np.ndarray:
    """Every participant gets the first participant's value (the group's root)."""
    return np.array(values[0], copy=True)
