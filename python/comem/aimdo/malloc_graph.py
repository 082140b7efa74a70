"""comfy-aimdo's ``malloc_graph`` (0.5.0 and later): the module, with its recording refused.

aimdo's allocation graphs ("the memory compiler" ComfyUI v0.39 runs by default)
record every device allocation a step makes through aimdo's ``cuMemAlloc``
hooks and replay them from one reservation. comem's pager does not hook the
driver, so it cannot record one: :func:`record` refuses, saying how to run
ComfyUI without it (``--disable-comfy-compiler``: torch's own allocator then
serves the step, as before v0.35). The module is here so that ComfyUI v0.39,
which imports it at start, starts over comem.aimdo.
"""

from __future__ import annotations

from typing import Any

REFUSAL = ("comem.aimdo has no memory compiler: aimdo's allocation graphs record allocations through its "
           "cuMemAlloc hooks, and comem's pager does not hook the driver; start ComfyUI with "
           "--disable-comfy-compiler")


def record(stream: Any, assert_graph_breaks: bool = False) -> Any:
    """aimdo: starts recording an allocation graph on ``stream``. Here: RuntimeError (see the module)."""
    raise RuntimeError(REFUSAL)
