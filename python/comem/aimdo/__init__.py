"""comfy-aimdo's Python API over comem's pager: code written for aimdo switches by changing its imports.

The modules mirror comfy-aimdo's: :mod:`comem.aimdo.control` (``init``,
``init_device``, ``set_simple_vram_headroom``, ``analyze``, ...),
:mod:`comem.aimdo.model_vbar` (``ModelVBAR``, ``vbar_fault``, ``vbar_unpin``,
``vbar_signature_compare``, ...), :mod:`comem.aimdo.vram_buffer`
(``VRAMBuffer``), :mod:`comem.aimdo.model_mmap` (``ModelMMAP``),
:mod:`comem.aimdo.storage` and :mod:`comem.aimdo.torch` (``aimdo_to_tensor``).
Behind them is comem's weight pager, attached to the coordinator when one
runs, so other processes' admissions can take unpinned pages from this
process while it computes. Switching an aimdo program::

    import comem.aimdo as comfy_aimdo          # was: import comfy_aimdo
    import comem.aimdo.control                 # was: import comfy_aimdo.control
    import comem.aimdo.torch                   # was: import comfy_aimdo.torch
    from comem.aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_unpin, vbar_signature_compare

What aimdo has and comem.aimdo does not is listed, with the reason, in
:data:`NOT_PROVIDED`; what comem.aimdo has with a narrower meaning, in
:data:`LIMITS` (``docs/aimdo-versions.md`` prints both;
``tests/python/test_aimdo_api.py`` fails on any other difference).
"""

from typing import Dict

from . import control, model_vbar  # noqa: F401  (comfy_aimdo.control etc. as attributes)

#: aimdo's public names (``module``, ``module.name`` or ``module.Class.member``; a module or class
#: covers everything in it) that comem.aimdo does not offer, each with why. ComfyUI 783545f6 uses
#: some of them; it runs over the real aimdo (its requirements pin it), which comem steers rather
#: than replaces (DESIGN principle 12), so these matter only to aimdo-shaped code without aimdo.
NOT_PROVIDED: Dict[str, str] = {
    "model_vbar.lib": "aimdo's ctypes handle, bound at import; comem's VBARs go through comem.Pager",
    "host_buffer.lib": "aimdo's ctypes handle; host_buffer is not provided",
    "vram_buffer.lib": "aimdo's ctypes handle; comem's VRAMBuffer goes through comem.Pager",
    "model_mmap.lib": "aimdo's ctypes handle; comem's ModelMMAP is Python's mmap",
    "storage.lib": "aimdo's ctypes handle (Windows only); comem's fast_disk asks no library",
    "model_vbar.PageoutCallback": "the ctypes type of aimdo 0.6.0's write-back hook; comem's pager has no "
                                  "write-back before eviction (ModelVBAR refuses pageout_callback)",
    "host_buffer": "pinned host staging (growable page-locked buffers, file-to-device readers and writers) is "
                   "ComfyUI's pin budget, not the device pager: comem books pins through Client.pin and does not "
                   "re-implement aimdo's readers; ComfyUI 783545f6 gets it from the real aimdo",
    "torch.hostbuf_to_tensor": "a tensor over a host_buffer.HostBuffer, which comem.aimdo does not provide",
    "torch.CUDAPluggableAllocator": "routes torch's allocator through aimdo's cuMemAlloc hooks; comem does not "
                                    "hook the driver (it keeps room for torch's working memory instead)",
    "torch.get_torch_allocator": "the same allocator (aimdo itself calls it experimental and unsupported)",
    "control.record": "aimdo 0.6.0's allocation-graph recording needs its allocator hooks; comem has none",
    "malloc_graph": "aimdo 0.6.0's allocation graphs (CUDA-graph capture of hooked allocations); no hooks in comem",
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
}
