"""What the store raises; each message says what to do next."""

from __future__ import annotations


class StoreError(Exception):
    """A store problem the user can act on (the message says how)."""


class StoreVersionError(StoreError):
    """The DB file was written by a newer infer-top; it is left unchanged."""

    def __init__(self, message: str, *, file_version: int, supported_version: int) -> None:
        super().__init__(message)
        self.file_version = file_version
        self.supported_version = supported_version


class RunNotFoundError(StoreError, KeyError):
    def __init__(self, run_id: str, candidates: tuple[str, ...] = ()) -> None:
        if candidates:
            msg = (
                f"run id {run_id!r} is ambiguous: it starts {len(candidates)} runs "
                f"({', '.join(candidates[:5])}); give more characters"
            )
        else:
            msg = f"no run {run_id}; `infer-top runs list` shows the ids"
        super().__init__(msg)
        self.run_id = run_id
        self.candidates = candidates

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class StoreWriteError(StoreError):
    """Rows could not be written (full disk, locked DB, bad values).

    ``unsaved`` rows are still held by the writer and retried; ``rejected``
    rows had values SQLite refused and were set aside (see ``Store.rejected``).
    """

    def __init__(self, message: str, *, unsaved: int = 0, rejected: int = 0) -> None:
        super().__init__(message)
        self.unsaved = unsaved
        self.rejected = rejected
