"""Run by ComfyUI before it imports its model manager: says where the comem binding was loaded from.

It delegates to :func:`comem.comfy.node.announce_binding` and touches none of
ComfyUI's state. Where ``comem`` cannot be imported it says nothing: this
folder's ``__init__.py`` says it once, with what to run.
"""

try:
    from comem.comfy.node import announce_binding
except Exception:  # __init__.py reports it (one line, not two)
    pass
else:
    announce_binding()
