"""Reading the judge's YAML files (SKU catalog, policy): safe, strict about keys, located.

:func:`load_located` parses with the fastest safe loader (libyaml's where PyYAML was built
with it), refuses a key given twice in one mapping (YAML says keys are unique; PyYAML
would keep the last one silently) and returns the line and column of every key and value,
so that :mod:`validator.fields` can say where a bad value is.
"""

from __future__ import annotations

from typing import Any

import yaml

from validator.fields import KeyPath, LoadError, Mark, Marks, quoted
from validator.limits import YAML_DEPTH, YAML_EXPANDED_VALUES
from validator.safe_text import one_line

# libyaml's loader when PyYAML was built with it; the pure-Python safe loader otherwise.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"

YAMLError = yaml.YAMLError


def load(text: str) -> object:
    """Parse one YAML document with a safe loader, refusing duplicate keys.

    Raises:
        LoadError: on a syntax error or a duplicate key (see :func:`load_located`).
    """
    return load_located(text)[0]


def check_expansion(root: yaml.Node | None, limit: int = YAML_EXPANDED_VALUES) -> None:
    """Refuse a document whose aliases make it stand for more than ``limit`` values.

    Aliases of aliases let a few lines stand for billions of values ("billion
    laughs"), and an anchor inside itself for endless ones: whatever walks the data
    then (ours, ansible's) never ends. Each node's expanded size is worked out once,
    on the composed graph, before anything is built from it.

    Raises:
        LoadError: the document expands past ``limit`` values or into itself (naming
            the key path and line of the first value that does), or it nests deeper
            than :data:`~validator.limits.YAML_DEPTH`.
    """
    if root is None:
        return
    sizes: dict[int, int] = {}
    paths: dict[int, KeyPath] = {id(root): ()}  # where each node was first met
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes and not done:
            continue
        children = _children(node, paths[id(node)])
        if not done:
            sizes[id(node)] = -1  # being sized: met again below it, it holds itself
            stack.append((node, True))
            for path, child in children:
                if sizes.get(id(child)) == -1:
                    raise _expansion_error(limit, node, paths[id(node)], endless=True)
                if len(path) > YAML_DEPTH:
                    raise LoadError("nested too deep", line=_mark(child)[0], syntax=True)
                paths.setdefault(id(child), path)
                stack.append((child, False))
            continue
        total = 1 + sum(sizes[id(child)] for _, child in children)
        if total > limit:
            raise _expansion_error(limit, node, paths[id(node)])
        sizes[id(node)] = total


def check_depth(text: str, limit: int = YAML_DEPTH) -> None:
    """Refuse a YAML text that nests deeper than ``limit``, before anything composes it.

    libyaml's parser is a loop, its composer (and PyYAML's) a recursion: on Python 3.9 a
    document 20,000 levels deep crashed the interpreter (SIGSEGV) there rather than raise.
    The events are counted, so nothing recurses; a syntax error is left to the loader.

    Raises:
        LoadError: "nested too deep", with the line where it passes ``limit``.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_SAFE_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limit:
                    raise LoadError(
                        "nested too deep", line=event.start_mark.line + 1, syntax=True
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return


def _children(node: yaml.Node, path: KeyPath) -> list[tuple[KeyPath, yaml.Node]]:
    """A node's keys and values, or items, each with its key path."""
    if isinstance(node, yaml.MappingNode):
        found: list[tuple[KeyPath, yaml.Node]] = []
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            found += [(path, key), ((*path, name), value)]
        return found
    if isinstance(node, yaml.SequenceNode):
        return [((*path, index), item) for index, item in enumerate(node.value)]
    return []


def _expansion_error(
    limit: int, node: yaml.Node, path: KeyPath, *, endless: bool = False
) -> LoadError:
    how = "into itself, endlessly" if endless else f"past {limit:,} values"
    what = quoted(path) if path else "the document"
    return LoadError(
        f"{what} expands through its aliases (*name) {how}: write the values out",
        line=node.start_mark.line + 1,
        column=node.start_mark.column + 1,
        path=path,
    )


def compose_checked(text: str) -> None:
    """Refuse a YAML text whose aliases expand past the bound (:func:`check_expansion`).

    For YAML another library loads (ansible's inventories); a syntax error is left to it.

    Raises:
        LoadError: as :func:`check_expansion`.
    """
    check_depth(text)
    loader = _SAFE_LOADER(text)
    try:
        check_expansion(loader.get_single_node())
    except yaml.YAMLError:
        return
    finally:
        loader.dispose()


def load_located(text: str) -> tuple[object, Marks]:
    """Parse one YAML document; also give where each key and value starts.

    Returns:
        The data (None for an empty document) and the marks of every key path.

    Raises:
        LoadError: a syntax error (``syntax`` set, with the line where YAML says), a
            document nested too deep, or a key given twice in one mapping (with the line
            and column of the second).
    """
    check_depth(text)
    loader = _SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Marks()
        check_expansion(node)
        marks = _walk(loader, node)
        data: object = loader.construct_document(node)
        return data, marks
    except LoadError:
        raise
    except yaml.YAMLError as exc:
        line = error_line(exc)
        raise LoadError(error_problem(exc), line=line, syntax=True) from None
    except RecursionError:
        raise LoadError("nested too deep", syntax=True) from None
    except ValueError as exc:  # a date that is no date, an integer of 5000 digits
        raise LoadError(f"a value cannot be read ({one_line(exc, 60)})", syntax=True) from None
    finally:
        loader.dispose()


def _mark(node: yaml.Node) -> Mark:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _walk(loader: Any, root: yaml.Node) -> Marks:  # noqa: ANN401 - PyYAML's loaders are untyped
    """Marks of every key path under ``root``; a duplicate key raises LoadError.

    Each node is visited once, so an alias (``*name``) adds no marks of its own and a
    document made of aliases of aliases cannot make the walk explode.
    """
    values: dict[KeyPath, Mark] = {}
    keys: dict[KeyPath, Mark] = {}
    seen: set[int] = set()
    stack: list[tuple[KeyPath, yaml.Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        values.setdefault(path, _mark(node))
        children: list[tuple[KeyPath, yaml.Node]] = []
        if isinstance(node, yaml.MappingNode):
            first: dict[object, Mark] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = loader.construct_object(key_node)
                child = (*path, key if isinstance(key, str) else str(key))
                if key in first:
                    line, column = _mark(key_node)
                    raise LoadError(
                        f"duplicate key {quoted(child)} (first at line {first[key][0]}); "
                        "keep one of them",
                        line=line,
                        column=column,
                        path=child,
                    )
                first[key] = _mark(key_node)
                keys.setdefault(child, first[key])
                children.append((child, value_node))
        elif isinstance(node, yaml.SequenceNode):
            children = [((*path, index), item) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return Marks(values=values, keys=keys)


def error_line(exc: yaml.YAMLError) -> int | None:
    """The 1-based line a YAML error points at, where it says."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = getattr(mark, "line", None)
    return line + 1 if isinstance(line, int) else None


def error_problem(exc: yaml.YAMLError) -> str:
    """The short description of a YAML error, without the file excerpt."""
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else "invalid YAML"
