"""The sampler under test: importing it from a ``--sampler`` value, and checking what one call returns.

A *sampler* is any callable with the signature of :func:`specimpl.speculative_generate`::

    fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator) -> GenerationResult

:func:`load_sampler` is the one place that imports a user's sampler (``python -m harness verify`` and
``python -m harness pit`` both use it); :func:`check_output` is the one check of a call's ``tokens``.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Callable

import torch

from specimpl.speculative import PAD

__all__ = ["load_sampler", "check_output", "SamplerSpecError", "SamplerOutputError"]

_FORMS = "'package.module:function' or 'path/to/file.py:function'"


class SamplerSpecError(ValueError):
    """Bad ``--sampler`` value."""


class SamplerOutputError(RuntimeError):
    """A sampler call returned something other than the documented ``GenerationResult``."""


def load_sampler(spec: str) -> Callable:
    """Import 'package.module:function' (or 'path/to/file.py:function'); errors name ``--sampler``."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise SamplerSpecError(f"`--sampler` must be {_FORMS}; got {spec!r}")
    mod_name, fn_name = spec.split(":")
    mod = _import_file(mod_name, spec) if mod_name.endswith(".py") else _import_module(mod_name, spec)
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise SamplerSpecError(f"`--sampler` must name a function of module {mod_name!r}; got {spec!r} "
                               f"(no attribute {fn_name!r})")
    if not callable(fn):
        raise SamplerSpecError(f"`--sampler` must name a callable; got {spec!r} ({type(fn).__name__})")
    return fn


def _import_file(file_name: str, spec: str):
    path = Path(file_name)
    if not path.is_file():
        raise SamplerSpecError(f"`--sampler` names the file {file_name!r}, which does not exist; got {spec!r}")
    ms = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(ms)
    try:
        ms.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - report any import-time failure of the user's file
        raise SamplerSpecError(f"`--sampler`: importing {file_name!r} failed: {type(e).__name__}: {e}") from None
    return mod


def _import_module(mod_name: str, spec: str):
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise SamplerSpecError(f"`--sampler` must name an importable module; got {spec!r} "
                               f"(No module named {e.name!r})") from None
    except Exception as e:  # noqa: BLE001
        raise SamplerSpecError(f"`--sampler`: importing {mod_name!r} failed: {type(e).__name__}: {e}") from None


def check_output(res, B: int, N: int, V: int, *, pad: bool = True) -> torch.Tensor:
    """The ``tokens`` (B, N) of one sampler call's result, checked: an integer tensor of that shape whose
    ids lie in [0, V), or are PAD = -1 after a sequence's end when ``pad`` (without EOS there is no PAD)."""
    tok = getattr(res, "tokens", None)
    if not torch.is_tensor(tok):
        raise SamplerOutputError(f"the sampler must return a GenerationResult whose `tokens` is a tensor; "
                                 f"got {type(res).__name__} with tokens of type {type(tok).__name__}")
    if tuple(tok.shape) != (B, N) or tok.is_floating_point() or tok.dtype == torch.bool:
        raise SamplerOutputError(f"the sampler's `tokens` must be an integer tensor of shape (B, max_new_tokens) = "
                                 f"{(B, N)}; got shape {tuple(tok.shape)}, dtype {tok.dtype}")
    bad = (tok < (PAD if pad else 0)) | (tok >= V)
    if bool(bad.any()):
        allowed = f"[0, {V}) or PAD = {PAD}" if pad else f"[0, {V}) (EOS is off, so no PAD)"
        raise SamplerOutputError(f"the sampler's `tokens` must hold ids in {allowed}; got {tok[bad][:5].tolist()}")
    return tok
