"""Statistics, verification, profiling, sweeps, reports and the command line.

The Python API (docs/api.md) is importable from here; it loads on first use, so ``import harness`` stays cheap::

    from harness import assert_lossless, verify_sampler, verify_samples
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and editors; at run time :func:`__getattr__` loads harness.api
    from harness.api import (ControlsFailed, Inconclusive, Loss, Lossy, SamplesVerification, Verification,
                             assert_lossless, verify_sampler, verify_samples)

API = ("assert_lossless", "verify_sampler", "verify_samples", "Verification", "SamplesVerification", "Loss", "Lossy",
       "Inconclusive", "ControlsFailed")
__all__ = list(API)


def __getattr__(name: str):
    """The API's names, imported from :mod:`harness.api` on first use (PEP 562)."""
    if name in API:
        from harness import api  # lazy: the API imports torch, pandas and the battery
        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(API))
