"""Parse ``nvcc --version``."""

from __future__ import annotations

import re

from validator.node.parsers.base import ParseError

# "Cuda compilation tools, release 12.4, V12.4.131": the V-number is release.patch.
_RELEASE = re.compile(r"Cuda compilation tools,\s*release\s+(\d+\.\d+),\s*V(\d+\.\d+\.\d+)", re.I)


def parse_nvcc_version(text: str) -> str:
    """The toolkit version nvcc reports, as release.patch (e.g. "12.4.131").

    The build id line (absent up to 10.x, "cuda_11.0_bu.TC445_..." in 11.0) and
    the "Built on" date format vary; only the "Cuda compilation tools" line is read.

    Args:
        text: output of ``nvcc --version`` (or ``nvcc -V``).

    Returns:
        The version.

    Raises:
        ParseError: no "Cuda compilation tools, release X.Y, VX.Y.Z" line.
    """
    match = _RELEASE.search(text)
    if match is None:
        raise ParseError("nvcc --version output has no 'Cuda compilation tools, release' line")
    release, full = match.groups()
    if not full.startswith(release + "."):
        raise ParseError(f"nvcc reports release {release} but version V{full}")
    return full
