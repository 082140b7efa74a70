"""comfy-aimdo's ``torch`` module over comem: tensors over VBAR allocations."""

from __future__ import annotations

import ctypes
from typing import Any, Tuple

import torch

from .. import torch as ctorch


def get_tensor_from_raw_ptr(ptr: int, size: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor of ``size`` bytes at ``ptr``: on a CUDA device through __cuda_array_interface__,
    on the CPU (the simulated card's host memory) through a buffer."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.as_tensor(ctorch._CudaArray(ptr, size), device=dev)
    return torch.frombuffer((ctypes.c_uint8 * size).from_address(ptr), dtype=torch.uint8)


def aimdo_to_tensor(alloc: Tuple[object, int, int], device: torch.device) -> torch.Tensor:
    """The tensor over an allocation ``(vbar, address, size)``; fault it first."""
    _, ptr, size = alloc
    return get_tensor_from_raw_ptr(ptr, size, device)


def hostbuf_to_tensor(hostbuf: Any) -> torch.Tensor:
    """A uint8 CPU tensor over the ``hostbuf.size`` bytes in use of a :class:`comem.aimdo.host_buffer.HostBuffer`."""
    return torch.frombuffer((ctypes.c_uint8 * hostbuf.size).from_address(hostbuf.get_raw_address()),
                            dtype=torch.uint8)
