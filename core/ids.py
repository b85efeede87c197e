"""Ids as typed values: validated once where they enter (a page, a CLI, a public core function), trusted inside.

`CustomerId.parse(raw)` runs the label rule (`validate_label`, below) and returns a `CustomerId`, a `str`, so SQL
parameters, f-strings and JSON take it as they take any text. A function inside core that takes a `CustomerId` does
not validate it again: mypy says where a plain `str` would reach it unparsed. Imports nothing of ours (the store,
the agents' tools and the privacy modules all use it).
"""

from __future__ import annotations

from typing import Any, Self

MAX_LABEL_LENGTH = 200


class InvalidIdentifier(ValueError):
    """An id or namespace label that cannot be stored or looked up safely. `reason` names the rule it broke
    (`not_text`, `empty`, `whitespace`, `too_long`, `nul`, `dot`) and `detail` its figures (`length`, `limit`), so a
    page can say it in its reader's language (ui.errors.invalid_id); the message is for logs and CLIs."""

    def __init__(self, message: str, reason: str = "invalid", **detail: int) -> None:
        super().__init__(message)
        self.reason, self.detail = reason, detail


def validate_label(label: Any, what: str = "id") -> str:
    """Return `label` unchanged if it is a usable namespace label, else raise InvalidIdentifier.

    Refused: non-strings, empty or blank, surrounding whitespace, `.` (the store's namespace
    separator), NUL, and more than MAX_LABEL_LENGTH characters. `%`, `_` and quotes are fine:
    every query binds them as parameters and escapes them in LIKE patterns.
    """
    if not isinstance(label, str):
        raise InvalidIdentifier(f"{what} must be text, got {type(label).__name__}", "not_text")
    if not label.strip():
        raise InvalidIdentifier(f"{what} is empty", "empty")
    if label != label.strip():
        raise InvalidIdentifier(f"{what} has leading or trailing whitespace: {label[:40]!r}", "whitespace")
    if len(label) > MAX_LABEL_LENGTH:
        raise InvalidIdentifier(
            f"{what} is {len(label)} characters long (at most {MAX_LABEL_LENGTH})",
            "too_long",
            length=len(label),
            limit=MAX_LABEL_LENGTH,
        )
    if "\x00" in label:
        raise InvalidIdentifier(f"{what} contains a NUL character", "nul")
    if "." in label:
        raise InvalidIdentifier(f"{what} contains '.', the namespace separator: {label[:40]!r}", "dot")
    return label


class CustomerId(str):
    """A customer id that passed the label rule (the `id` of the namespace `("clientes", id)`).

    Built only through the rule: `CustomerId(raw)` validates too (so no unchecked one exists), and `parse` returns
    a value that already is a CustomerId as it is, without validating it again.
    """

    __slots__ = ()
    WHAT = "customer id"  # how InvalidIdentifier's message names it

    def __new__(cls, raw: object) -> Self:
        return super().__new__(cls, validate_label(raw, cls.WHAT))

    @classmethod
    def parse(cls, raw: object) -> CustomerId:
        """`raw` as a CustomerId; raises InvalidIdentifier (`customer id is empty`, `... contains '.'`, ...)."""
        return raw if isinstance(raw, CustomerId) else cls(raw)


class _NamingText(str):
    """Text that can name a stored row: text, not blank, no NUL (PostgreSQL text cannot hold it), at most LIMIT
    characters. `.`, `%`, `_` and quotes are literal characters: queries bind it as a parameter."""

    __slots__ = ()
    WHAT = "text"  # how InvalidIdentifier's message names it
    EMPTY = "text is empty"
    LIMIT = 1000
    STRIP = False  # kept as typed (an id), or stripped (a search)

    def __new__(cls, raw: object) -> Self:
        if not isinstance(raw, str):
            raise InvalidIdentifier(f"{cls.WHAT} must be text, got {type(raw).__name__}", "not_text")
        if not raw.strip():
            raise InvalidIdentifier(cls.EMPTY, "empty")
        if "\x00" in raw:
            raise InvalidIdentifier(f"{cls.WHAT} contains a NUL character", "nul")
        if len(raw) > cls.LIMIT:
            raise InvalidIdentifier(
                f"{cls.WHAT} is {len(raw)} characters long (at most {cls.LIMIT})",
                "too_long",
                length=len(raw),
                limit=cls.LIMIT,
            )
        return super().__new__(cls, raw.strip() if cls.STRIP else raw)

    @classmethod
    def parse(cls, raw: object) -> Self:
        """`raw` parsed (as it is when it already is one); raises InvalidIdentifier saying what is wrong with it."""
        return raw if isinstance(raw, cls) else cls(raw)


# Thread ids are the agents' own (LangGraph takes any text: uuids, `conv-<uuid>`, `cliente:C1:...`); the bound only
# keeps a pasted page of text out of the queries.
MAX_THREAD_ID_LENGTH = 1000
MAX_SEARCH_LENGTH = 400


class ThreadId(_NamingText):
    """A thread id that can name a stored thread, kept as typed (spaces inside or around are the agents' business).
    Parsed where it enters (the Checkpoints page's box and link, a CLI); the history reads take a ThreadId and do not
    check it again."""

    __slots__ = ()
    WHAT, EMPTY, LIMIT = "thread id", "thread id is empty", MAX_THREAD_ID_LENGTH


class NamespaceSearch(_NamingText):
    """What a reader typed to find a namespace, stripped: a full prefix (`clientes.C9`) or an id under any root
    (`C9`). The Memory page parses it once for its three reads (exact match, suggestions, the refusal it logs); a
    plain `str` given to those reads (a bench, a test) is parsed there."""

    __slots__ = ()
    WHAT, EMPTY, LIMIT, STRIP = (
        "the search",
        "type a namespace (e.g. clientes.C9) or an id (e.g. C9)",
        MAX_SEARCH_LENGTH,
        True,
    )


__all__ = [
    "MAX_LABEL_LENGTH",
    "MAX_SEARCH_LENGTH",
    "MAX_THREAD_ID_LENGTH",
    "CustomerId",
    "InvalidIdentifier",
    "NamespaceSearch",
    "ThreadId",
    "validate_label",
]
