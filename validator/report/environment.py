"""The one Jinja2 environment every report template is rendered with.

Templates live in the repository's top-level ``templates/`` directory; the wheel
ships them as the ``validator.templates`` package data. The environment is strict:
a name the template uses but the renderer did not pass is an error, never an empty
string, and HTML/XML output is escaped. Every value a template prints has its control
characters made visible first (:func:`validator.safe_text.visible`): autoescape leaves ESC
and BEL alone, so a host name could otherwise carry them into the HTML's text.
"""

from __future__ import annotations

import functools
import importlib.resources
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from validator.error_tree import ReportError
from validator.model import Unavailable
from validator.report import shared
from validator.safe_text import visible

TEMPLATE_PACKAGE = "validator.templates"
# A template every installation has; used to tell a real templates directory
# from an empty namespace package.
_PROBE = "report.html.j2"

# Formats whose output is markup, with and without the ``.j2`` suffix: plain
# ``select_autoescape(["html"])`` would see ``report.html.j2`` as a "j2" file and
# not escape it. Text, Markdown, Prometheus and script output must not be
# HTML-escaped, or "<" in a message would arrive as "&lt;". Anything else, and
# string templates, are escaped: too much escaping shows in review, too little
# is an injection.
_MARKUP = ("html", "htm", "xhtml", "xml", "svg")
_PLAIN = ("txt", "text", "md", "prom", "js", "css", "json")


def autoescapes(name: str | None) -> bool:
    """Whether a template of this file name is rendered with HTML escaping."""
    choice = get_environment().autoescape
    return bool(choice(name) if callable(choice) else choice)


def templates_dir() -> Path:
    """Where the report templates are.

    Returns:
        The installed ``validator.templates`` directory when there is one, else
        ``templates/`` at the top of a source checkout.

    Raises:
        ReportError: when neither exists.
    """
    try:
        root = importlib.resources.files(TEMPLATE_PACKAGE)
    except (ModuleNotFoundError, TypeError):
        root = None
    if root is not None:
        # A namespace package yields a MultiplexedPath; asking for a child gives
        # a real path whose parent a FileSystemLoader can use.
        probe = root.joinpath(_PROBE)
        if isinstance(probe, Path) and probe.is_file():
            return probe.parent
    checkout = Path(__file__).resolve().parents[2] / "templates"
    if (checkout / _PROBE).is_file():
        return checkout
    raise ReportError(
        f"report templates not found (package {TEMPLATE_PACKAGE} or {checkout}); "
        "reinstall gpuready or run from a complete source checkout"
    )


def _is_unavailable(value: object) -> bool:
    return isinstance(value, Unavailable)


def _shown(value: object) -> object:
    """What a ``{{ }}`` prints, its text with control characters made visible.

    Markup (an SVG chart, a filter's HTML) stays markup: its tags hold no control
    characters, and the ones a text inside it carries are escaped all the same.
    """
    if isinstance(value, markupsafe.Markup):
        # Safe: it was markup already, and an escape adds only a backslash and hex digits.
        return markupsafe.Markup(visible(str(value), lines=True))  # noqa: S704
    if isinstance(value, str):
        return visible(value, lines=True)
    return value


@functools.lru_cache(maxsize=1)
def get_environment() -> jinja2.Environment:
    """The shared, strict Jinja2 environment (built once).

    Filters: ``show`` and ``show_pair`` (facts for people, ``n/a (reason)`` for
    missing ones), ``one_line``. Test: ``unavailable``.

    Returns:
        The environment.

    Raises:
        ReportError: when the templates directory cannot be found.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(
            enabled_extensions=_MARKUP + tuple(f"{ext}.j2" for ext in _MARKUP),
            disabled_extensions=_PLAIN + tuple(f"{ext}.j2" for ext in _PLAIN),
            default_for_string=True,
            default=True,
        ),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters["show"] = shared.show
    env.filters["show_pair"] = shared.show_pair
    env.filters["one_line"] = shared.one_line
    env.tests["unavailable"] = _is_unavailable
    return env


def _template_line(exc: BaseException, filename: str | None) -> int | None:
    """The template line a render error happened on, from Jinja's rewritten traceback."""
    lineno = getattr(exc, "lineno", None)
    if isinstance(lineno, int):
        return lineno
    # Templates without a file (string loaders) compile under this name.
    target = filename or "<template>"
    line: int | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == target:
            line = frame.lineno
    return line


def render_template(
    name: str,
    context: dict[str, Any],
    *,
    environment: jinja2.Environment | None = None,
) -> str:
    """Render one template, turning template mistakes into :class:`ReportError`.

    Args:
        name: template file name under ``templates/``, e.g. ``report.html.j2``.
        context: the names the template may use.
        environment: an overlay of :func:`get_environment` (tests use one with
            their own loader); the shared environment when omitted.

    Returns:
        The rendered text.

    Raises:
        ReportError: the template is missing, has a syntax error, or uses a
            name that is not defined; the message names template and line.
    """
    return "".join(render_template_chunks(name, context, environment=environment))


def render_template_chunks(
    name: str,
    context: dict[str, Any],
    *,
    environment: jinja2.Environment | None = None,
) -> Iterator[str]:
    """Render one template piece by piece (Jinja's ``generate``), errors as :func:`render_template`.

    A context value that is a generator is consumed as the template reaches it, so
    a large report never exists as one string: the writer streams the pieces to disk.

    Args:
        name: template file name under ``templates/``.
        context: the names the template may use.
        environment: an overlay of :func:`get_environment`; the shared one when omitted.

    Yields:
        Pieces of the rendered text, in order.

    Raises:
        ReportError: as :func:`render_template`; raised when the piece is reached.
    """
    env = environment if environment is not None else get_environment()
    filename: str | None = None
    try:
        template = env.get_template(name)
        filename = template.filename
        yield from template.generate(context)
    except jinja2.TemplateNotFound as exc:
        raise ReportError(
            f"report template {exc.name} not found; reinstall gpuready or restore the file"
        ) from exc
    except jinja2.TemplateSyntaxError as exc:
        where = exc.name or exc.filename or name
        raise ReportError(
            f"report template {where} line {exc.lineno}: {exc.message}; fix the template"
        ) from exc
    except jinja2.TemplateError as exc:
        line = _template_line(exc, filename)
        at = f" line {line}" if line is not None else ""
        raise ReportError(f"report template {name}{at}: {exc}; fix the template") from exc
