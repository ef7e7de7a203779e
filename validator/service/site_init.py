"""``gpuready init DIR``: a new site's inventory and version pins, from the ones gpuready ships.

The wheel carries ``inventory/`` of the repository as ``validator.inventory``: the example
inventory and ``group_vars/all.yml``, the one place the NVIDIA stack is pinned. A pipx
install has no checkout to copy them from, and Ansible reads ``group_vars/`` only
beside the inventory (or the playbook, where it would override the site's own pins),
so ``init`` writes both into the operator's folder:

* ``DIR/hosts.ini``: the example inventory, to put the site's hosts in;
* ``DIR/group_vars/all.yml``: the pins, read by ``gpuready provision -i DIR/hosts.ini``
  and ``gpuready certify -i DIR/hosts.ini`` alike.

Nothing is overwritten unless asked (``force``), and then only a regular file: a link
or anything else in the way is refused, never followed (validator.files), as is a
link at ``DIR`` or ``DIR/group_vars``. Each file is written whole or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from validator.error_tree import BadInputError, CouldNotRunError
from validator.files import Folder
from validator.limits import SMALL_FILE_BYTES, OverLimitError, read_bounded

# Where each shipped file goes under DIR: (folder below DIR or "", name), by its source.
SITE_FILES: dict[str, tuple[str, str]] = {
    "hosts.example.ini": ("", "hosts.ini"),
    "group_vars/all.yml": ("group_vars", "all.yml"),
}


def shipped_inventory() -> Path:
    """The shipped ``inventory/``: in the wheel (``validator.inventory``), else the checkout's."""
    import validator

    package = Path(validator.__file__).resolve().parent
    installed = package / "inventory"
    if (installed / "hosts.example.ini").is_file():
        return installed
    return package.parent / "inventory"


def site_files() -> dict[str, bytes]:
    """The shipped files by their place under DIR (``hosts.ini``, ``group_vars/all.yml``).

    Raises:
        CouldNotRunError: a shipped file is missing or unreadable (a broken install).
    """
    source = shipped_inventory()
    files: dict[str, bytes] = {}
    for name, (folder, target) in SITE_FILES.items():
        try:
            data = read_bounded(source / name, SMALL_FILE_BYTES)
        except (OSError, OverLimitError) as exc:
            raise CouldNotRunError(
                f"{source / name}: cannot read the shipped file ({exc}): reinstall gpuready"
            ) from None
        files[os.path.join(folder, target) if folder else target] = data
    return files


def _existing(root: Folder, folder: str, name: str) -> bool:
    """Whether ``name`` is already in ``folder`` of ``root``; a link or non-file is refused."""
    if not folder:
        return root.check_file(name)
    if root.lstat(folder) is None:
        return False
    with root.child(folder, create=False) as sub:
        return sub.check_file(name)


def init_site(directory: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
    """Write the example inventory and the pins into ``directory`` (made when missing).

    Args:
        directory: the site's folder (the operator's).
        force: overwrite files already there (regular files only).

    Returns:
        The files written, in order.

    Raises:
        BadInputError: a file is there already and ``force`` is not given (nothing is
            written then).
        UnsafePathError: a link or another kind of file is where a folder or file goes.
        CouldNotRunError: the folder cannot be written, or the shipped files are missing.
    """
    files = site_files()
    written: list[Path] = []
    try:
        with Folder.open(directory) as root:
            places = [(*SITE_FILES[source], source) for source in SITE_FILES]
            there = [Path(directory, folder, name) for folder, name, _ in places
                     if _existing(root, folder, name)]  # fmt: skip
            if there and not force:
                names = " and ".join(str(path) for path in there)
                raise BadInputError(
                    f"{names} already exist{'s' if len(there) == 1 else ''}: edit "
                    f"{'it' if len(there) == 1 else 'them'}, or give --force to overwrite"
                )
            for folder, name, _ in places:
                data = files[os.path.join(folder, name) if folder else name]
                if folder:
                    with root.child(folder) as sub:
                        written.append(sub.write(name, data, 0o644))
                else:
                    written.append(root.write(name, data, 0o644))
    except OSError as exc:
        raise CouldNotRunError(
            f"cannot write into {directory}: {exc.strerror or exc}: choose a writable folder"
        ) from None
    return written


__all__ = ["SITE_FILES", "init_site", "shipped_inventory", "site_files"]
