"""comfy-aimdo's Python API over comem's pager: code written for aimdo switches by changing its imports.

The modules mirror comfy-aimdo's: :mod:`comem.aimdo.control` (``init``,
``init_device``, ``set_simple_vram_headroom``, ``analyze``, ...),
:mod:`comem.aimdo.model_vbar` (``ModelVBAR``, ``vbar_fault``, ``vbar_unpin``,
``vbar_signature_compare``, ...), :mod:`comem.aimdo.vram_buffer`
(``VRAMBuffer``), :mod:`comem.aimdo.model_mmap` (``ModelMMAP``),
:mod:`comem.aimdo.storage`, :mod:`comem.aimdo.torch` (``aimdo_to_tensor``,
``hostbuf_to_tensor``), :mod:`comem.aimdo.host_buffer` (``HostBuffer``, the file
readers) and :mod:`comem.aimdo.malloc_graph` (whose ``record`` refuses: no memory
compiler without aimdo's allocator hooks).
Behind them is comem's weight pager, attached to the coordinator when one
runs, so other processes' admissions can take unpinned pages from this
process while it computes. Switching an aimdo program::

    import comem.aimdo as comfy_aimdo          # was: import comfy_aimdo
    import comem.aimdo.control                 # was: import comfy_aimdo.control
    import comem.aimdo.torch                   # was: import comfy_aimdo.torch
    from comem.aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_unpin, vbar_signature_compare

A program that imports ``comfy_aimdo`` itself, such as ComfyUI, runs over comem.aimdo
through :func:`as_comfy_aimdo` or ``python -m comem.aimdo main.py [ARGS...]``, which
makes every ``comfy_aimdo`` module name comem.aimdo's before the program starts
(ComfyUI v0.39 needs ``--disable-comfy-compiler`` then).

What aimdo has and comem.aimdo does not is listed, with the reason, in
:data:`NOT_PROVIDED`; what comem.aimdo has with a narrower meaning, in
:data:`LIMITS` (``docs/aimdo-versions.md`` prints both;
``tests/python/test_aimdo_api.py`` fails on any other difference).
"""

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Dict, Optional

from . import control, model_vbar  # noqa: F401  (comfy_aimdo.control etc. as attributes)

#: comfy-aimdo's modules, each of which comem.aimdo offers under the same name.
MODULES = ("control", "model_vbar", "vram_buffer", "model_mmap", "storage", "torch", "host_buffer", "malloc_graph")


class _AsComfyAimdo(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``comfy_aimdo`` and ``comfy_aimdo.<module>`` to comem.aimdo's modules when first
    imported (not before: comem.aimdo.torch imports torch, which ComfyUI sets up first)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if fullname == "comfy_aimdo" or (fullname.startswith("comfy_aimdo.") and
                                         fullname.split(".", 1)[1] in MODULES):
            return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "comfy_aimdo")
        return None

    def create_module(self, spec: Any) -> Any:
        ours = __name__ + spec.name[len("comfy_aimdo"):]
        return importlib.import_module(ours)

    def exec_module(self, module: Any) -> None:
        pass  # comem.aimdo's module, already executed by its own import


def as_comfy_aimdo() -> None:
    """Makes every ``comfy_aimdo`` module name resolve to comem.aimdo's (first on ``sys.meta_path``), so
    that code importing comfy-aimdo (ComfyUI's ``main.py``) gets comem's pager. Call it before that code
    imports anything of aimdo's; RuntimeError if the real comfy-aimdo was imported already (two pagers
    in one process would each think the card theirs). Calling it twice is harmless."""
    real = [name for name, mod in sys.modules.items()
            if (name == "comfy_aimdo" or name.startswith("comfy_aimdo.")) and
            not getattr(mod, "__name__", "").startswith(__name__)]
    if real:
        raise RuntimeError(f"the real comfy-aimdo is imported already ({', '.join(sorted(real))}): call "
                           "comem.aimdo.as_comfy_aimdo() before anything imports it")
    if not any(isinstance(f, _AsComfyAimdo) for f in sys.meta_path):
        sys.meta_path.insert(0, _AsComfyAimdo())


#: aimdo's public names (``module``, ``module.name`` or ``module.Class.member``; a module or class
#: covers everything in it) that comem.aimdo does not offer, each with why. ComfyUI 783545f6 uses
#: some of them; it runs over the real aimdo (its requirements pin it), which comem steers rather
#: than replaces (DESIGN principle 12), so these matter only to aimdo-shaped code without aimdo.
NOT_PROVIDED: Dict[str, str] = {
    "model_vbar.lib": "aimdo's ctypes handle, bound at import; comem's VBARs go through comem.Pager",
    "vram_buffer.lib": "aimdo's ctypes handle; comem's VRAMBuffer goes through comem.Pager",
    "model_mmap.lib": "aimdo's ctypes handle; comem's ModelMMAP is Python's mmap",
    "storage.lib": "aimdo's ctypes handle (Windows only); comem's fast_disk asks no library",
    "model_vbar.PageoutCallback": "the ctypes type of aimdo 0.6.0's write-back hook; comem's pager has no "
                                  "write-back before eviction (ModelVBAR refuses pageout_callback)",
    "host_buffer.lib": "aimdo's ctypes handle; comem's HostBuffer is an anonymous mapping",
    "malloc_graph.MallocGraph": "an allocation graph (aimdo 0.5.0+) records allocations through aimdo's cuMemAlloc "
                                "hooks; comem's pager has none, so record refuses and no graph is ever made",
    "torch.CUDAPluggableAllocator": "routes torch's allocator through aimdo's cuMemAlloc hooks; comem does not "
                                    "hook the driver (it keeps room for torch's working memory instead)",
    "torch.get_torch_allocator": "the same allocator (aimdo itself calls it experimental and unsupported)",
}

#: Names comem.aimdo offers whose meaning is narrower than aimdo's: the name (or ``name(parameter)``) and how.
LIMITS: Dict[str, str] = {
    "control.lib": "not aimdo's ctypes handle: a stand-in (None before init) offering only set_simple_vram_headroom, "
                   "get_simple_vram_headroom and get_total_vram_usage",
    "control.init(implementation)": "None, 'cuda' or 'sim'; 'rocm' returns False (no HIP backend)",
    "control.init(nvml_pressure)": "recorded only: comem's device term reads the card through its own probe",
    "control.init_devices": "may be called again to add devices (aimdo 0.6.0 refuses a second call)",
    "control.get_devctx": "returns the device's comem.Pager, not an opaque pointer",
    "model_vbar.ModelVBAR(pageout_callback)": "only None: NotImplementedError otherwise (no write-back hook)",
    "model_vbar.ModelVBAR.prioritize(malloc_async_clamp)": "accepted, no effect: it bounds aimdo's "
                                                          "cuMemAllocAsync hook, which comem does not have",
    "model_vbar.ModelVBAR.fault": "signatures are bytes (aimdo: a ctypes uint32 array); compare them with "
                                  "vbar_signature_compare",
    "storage.fast_disk": "always None (unknown), as aimdo answers off Windows",
    "malloc_graph.record": "refuses (RuntimeError naming --disable-comfy-compiler): no memory compiler without "
                           "aimdo's allocator hooks",
    "control.record": "the same refusal as malloc_graph.record",
    "host_buffer.HostBuffer.extend(reallocate)": "accepted, never used: a buffer never moves (ComfyUI keeps tensors "
                                                 "over it), so growth past its reservation raises RuntimeError",
    "host_buffer.HostBuffer(prewarm)": "kept as an attribute, no effect: aimdo's reader tuning",
    "host_buffer.HostBuffer(mark_cold)": "kept, no effect: reads go through the page cache (no O_DIRECT, no "
                                         "dropping of read pages)",
    "host_buffer.HostBuffer": "POSIX systems only (an anonymous mapping reserved at its largest size): "
                              "RuntimeError on Windows",
    "host_buffer.HostBuffer.register": "page-locks through the CUDA runtime torch carries; without a GPU a no-op",
    "host_buffer.read_file_to_device(mark_cold)": "accepted, no effect (as HostBuffer's)",
}
