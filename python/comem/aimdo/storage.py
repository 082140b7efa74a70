"""comfy-aimdo 0.6.0's ``storage`` module: what kind of disk a path lives on.

aimdo answers only on Windows (through its library) and says None elsewhere;
comem has no such probe, so it always says None ("unknown"), which callers
already treat as "not known to be fast".
"""

from __future__ import annotations

import os
from typing import Optional, Union


def fast_disk(path: Union[str, "os.PathLike[str]"]) -> Optional[bool]:
    """Whether ``path`` is on a fast (solid-state) disk: always None (unknown) in comem."""
    os.fspath(path)  # the same TypeError aimdo raises for a non-path
    return None
