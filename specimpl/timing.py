"""Phase timings that stay honest on asynchronous devices.

CUDA kernels return before they finish, so a wall-clock stamp taken after a model call would
charge its work to whatever phase waits next.  The samplers call :func:`device_syncer`'s function
before each stamp; off CUDA it does nothing and costs nothing.
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["device_syncer"]


def device_syncer(device) -> Callable[[], None]:
    """A function of no arguments that waits for ``device`` to finish its queued work (a no-op off CUDA)."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
