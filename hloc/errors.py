"""The exceptions hloc raises; each maps to an exit status of the CLI contract."""

from __future__ import annotations


class HlocError(Exception):
    """Base class: a clean, one-line, user-facing error. `path` names the file involved."""

    exit_code = 2
    # Set by hloc.runtime.ranks.on_all_ranks: raised identically by every rank of an MPI job,
    # and `quiet` on the ranks that leave the report to rank 0.
    all_ranks: bool = False
    quiet: bool = False

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InputError(HlocError):
    """Bad user input: a malformed model, bundle, input file or flag value (exit 2)."""


class ParseError(InputError):
    """HLO text that does not parse; the message carries line:column."""

    file: str | None = None
    line: int | None = None
    column: int | None = None


class VerifyError(InputError):
    """A module that breaks an HLO rule; names the computation, instruction and rule."""


class UnsupportedError(HlocError):
    """A valid module using something hloc does not implement (exit 2, never a silent wrong answer)."""


class CheckFailed(HlocError):
    """A requested check failed, e.g. outputs differ from the expected ones (exit 1)."""

    exit_code = 1
