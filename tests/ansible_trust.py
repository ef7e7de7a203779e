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


def is_true(templar: Any, condition: str) -> bool:
    """What a task's ``when: condition`` decides, as the installed ansible-core decides it.

    ``Templar.evaluate_conditional`` is 2.19's; before it, the condition is templated as an
    expression in an ``if``, which is what ``when`` did there.
    """
    evaluate = getattr(templar, "evaluate_conditional", None)
    if evaluate is not None:
        return bool(evaluate(trusted(condition)))
    decided = templar.template(f"{{% if {condition} %}}True{{% else %}}False{{% endif %}}")
    return str(decided) == "True"
