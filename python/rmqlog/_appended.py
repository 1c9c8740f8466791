"""What ``append_batch(..., msg_ids=...)`` returns."""

from __future__ import annotations


class Appended(list):  # type: ignore[type-arg]
    """The offset of each record of an ``append_batch`` with ``msg_ids``: where it was written,
    or, for a record whose id was already in the log's de-duplication window (or on an earlier
    record of the batch), the offset of the record that has it.

    ``duplicates`` lists the positions in the batch of the records that were not written.
    """

    __slots__ = ("duplicates",)

    duplicates: list[int]

    def __repr__(self) -> str:
        return f"Appended({list.__repr__(self)}, duplicates={self.duplicates!r})"
