"""Weight-streaming linear layers for few-token forwards on the CPU (the memory-bound pair's kernel).

Why: on this project's CPU (AVX2, no AVX-512) PyTorch's float32 ``linear`` runs a matrix-vector product
for one token row but a general matrix product for two or more, which re-reads and repacks the weights:
scoring 2 rows of a 64 MB layer costs about 2x one, 5 rows about 5x (results/skinny_gemm/bench.md).
Decoding engines use kernels built for this shape (few rows of activations against a large weight).
:file:`harness/speedup/membound/csrc/skinny_gemm.c` is one: each panel of weight rows is read from memory once and dotted
with every activation row while in cache, so 2 rows cost about 1.15x one and 5 rows about 1.8x; it is
faster than PyTorch's up to 144 rows and 3 % slower at 512 (experiments/skinny_gemm_bench.py).  It runs on one
thread (the sweeps run ``threads = 1``).

Every output element is summed in one fixed order whatever the number of rows, so a token's logits do not
depend on what else is in the batch (batch-invariant); against PyTorch's kernel they differ by float
round-off only (tests/speedup/test_skinny_linear.py).

:func:`use_skinny_linear` swaps a model's ``torch.nn.Linear`` layers for :class:`SkinnyLinear` (same
weight tensors, no copy).  The kernel is compiled on first use with the system C compiler (``cc``) into
``build/skinny_gemm/<key>/``, ``<key>`` a hash of the source, the compiler's version and the flags, so a
library is reused only for the same inputs; a missing compiler is a clear error naming the option.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from specimpl.errors import check_arg

__all__ = ["SkinnyLinear", "use_skinny_linear", "replace_linears", "skinny_linear", "load_kernel", "SOURCE", "BUILD_DIR"]

SOURCE = Path(__file__).resolve().parent / "csrc" / "skinny_gemm.c"
BUILD_DIR = Path(__file__).resolve().parents[3] / "build" / "skinny_gemm"
_FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")
_LIB = None


def _compiler() -> str:
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc) or (shutil.which("gcc") if "CC" not in os.environ else None)
    check_arg(found is not None, "prepack", "skinny",
              f"used with a C compiler ({cc!r} not found: install gcc, or set $CC)", RuntimeError)
    return found


def load_kernel():
    """The compiled kernel (built on first use, then cached on disk by content and in memory)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    cpu = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")), "") \
        if Path("/proc/cpuinfo").exists() else ""  # -march=native: a library is built for one instruction set
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode() + " ".join(_FLAGS).encode() + cpu.encode()).hexdigest()[:16]
    lib_path = BUILD_DIR / key / "libskinny_gemm.so"
    if not lib_path.exists():
        lib_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib_path.parent) as tmp:  # build privately, then rename
            tmp_lib = Path(tmp) / lib_path.name
            done = subprocess.run([cc, *_FLAGS, "-o", str(tmp_lib), str(SOURCE)], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"`prepack` 'skinny': compiling {SOURCE} with {cc} failed: "
                                   f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
            os.replace(tmp_lib, lib_path)
    lib = ctypes.CDLL(str(lib_path))
    lib.skinny_gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3
    lib.skinny_gemm.restype = None
    _LIB = lib
    return lib


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """``torch.nn.functional.linear(x, weight, bias)`` through the weight-streaming kernel (float32, CPU)."""
    K = weight.shape[1]
    rows = x.reshape(-1, K).contiguous()                                     # (M, K)
    y = torch.empty(rows.shape[0], weight.shape[0], dtype=torch.float32)     # (M, N)
    load_kernel().skinny_gemm(rows.data_ptr(), weight.data_ptr(), y.data_ptr(), rows.shape[0], weight.shape[0], K)
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


class SkinnyLinear(torch.nn.Module):
    """A ``torch.nn.Linear`` (float32, CPU, inference) whose product runs through :func:`skinny_linear`."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        check_arg(linear.weight.dtype == torch.float32, "model dtype", linear.weight.dtype, "torch.float32")
        check_arg(linear.weight.device.type == "cpu", "model.device", str(linear.weight.device), "'cpu'")
        self.weight = torch.nn.Parameter(linear.weight.detach().contiguous(), requires_grad=False)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_arg(x.dtype == torch.float32, "input dtype", x.dtype, "torch.float32")
        return skinny_linear(x, self.weight, self.bias)


def use_skinny_linear(model):
    """Replace every ``torch.nn.Linear`` of ``model`` (an :class:`specimpl.hf.HFModel`, float32, on the CPU)
    by :class:`SkinnyLinear` (the same weights); returns ``model``."""
    check_arg(str(model.device) == "cpu", "model.device", str(model.device), "'cpu' (the skinny kernel is for CPUs)")
    load_kernel()
    return replace_linears(model, SkinnyLinear)


def replace_linears(model, make):
    """Replace every ``torch.nn.Linear`` under ``model.model`` by ``make(linear)``; returns ``model``."""
    def convert(mod):
        for name, child in list(mod.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(mod, name, make(child))
            else:
                convert(child)
    with torch.no_grad():
        convert(model.model)
    return model
