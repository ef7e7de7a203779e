"""Role text marked trusted, as ansible-core templates a role's own files.

ansible-core 2.19 templates only trusted text; before it (2.15-2.18, all that Python 3.9's
controller can have) every string is templated, so the text goes in as it is.
"""

from __future__ import annotations

from typing import Any


def trusted(value: Any) -> Any:
    """``value`` (a string, or lists and dicts of them) as text ansible-core will template."""
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core < 2.19 trusts every string
        return value
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value
