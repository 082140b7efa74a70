"""Test stub (see ../README): Debian does not package einops; ComfyUI's models use it only in forward passes."""


def _missing(*args, **kwargs):
    raise NotImplementedError("einops is a test stub: no real model's forward pass runs in these tests")


rearrange = repeat = reduce = einsum = pack = unpack = _missing
