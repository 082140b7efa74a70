"""comfy-aimdo's Python API over comem's pager: code written for aimdo switches by changing its imports.

The modules mirror comfy-aimdo's: :mod:`comem.aimdo.control` (``init``,
``init_device``, ``set_simple_vram_headroom``, ``analyze``, ...),
:mod:`comem.aimdo.model_vbar` (``ModelVBAR``, ``vbar_fault``, ``vbar_unpin``,
``vbar_signature_compare``, ...) and :mod:`comem.aimdo.torch`
(``aimdo_to_tensor``). Behind them is comem's weight pager, attached to the
coordinator when one runs, so other processes' admissions can take unpinned
pages from this process while it computes. Switching an aimdo program::

    import comem.aimdo as comfy_aimdo          # was: import comfy_aimdo
    import comem.aimdo.control                 # was: import comfy_aimdo.control
    import comem.aimdo.torch                   # was: import comfy_aimdo.torch
    from comem.aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_unpin, vbar_signature_compare
"""

from . import control, model_vbar  # noqa: F401  (comfy_aimdo.control etc. as attributes)
