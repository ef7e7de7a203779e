"""What every parser shares: the error it raises on input it cannot read."""

from __future__ import annotations

from validator.error_tree import BadInputError


class ParseError(BadInputError):
    """Text that is not the tool output a parser expects; the message names what was wrong."""
