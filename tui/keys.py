"""Keys, read from the bindings themselves: which are single printable keys (a text field
with the focus takes those as text, so they never act there), and every key a screen
answers (the help screen lists them)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.keys import key_to_character
from textual.widgets import Input, TextArea


def bindings_of(cls: type[DOMNode]) -> tuple[Binding, ...]:
    """Every binding ``cls`` answers, its bases' included (a subclass's key wins)."""
    merged: dict[str, Binding] = {}
    for base in reversed(cls.__mro__):
        own: list[BindingType] = vars(base).get("BINDINGS", [])
        for binding in Binding.make_bindings(own):
            merged[binding.key] = binding
    return tuple(merged.values())


def _printable(binding: Binding) -> bool:
    return any(
        (char := key_to_character(key.strip())) is not None and char.isprintable()
        for key in binding.key.split(",")
    )


def typed_actions(bindings: Iterable[Binding]) -> frozenset[str]:
    """The actions (names, without parameters) of the single printable keys."""
    return frozenset(b.action.split("(", 1)[0] for b in bindings if _printable(b))


def typing(node: DOMNode) -> bool:
    """A text field has the focus: a printable key is text there, not a command."""
    return isinstance(node.screen.focused, Input | TextArea)
