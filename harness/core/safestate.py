"""Saved state that cannot run code: plain data in an ``.npz`` file, its header read before anything else.

Resume state (a verify run's draw shards under ``<out>/_tmp_state/``) used to be pickled, and unpickling runs
whatever the file says (a ``__reduce__`` that starts a command).  A file of this module holds only

* ``header``: UTF-8 JSON (the fingerprint of what made the state, the sources it covered: the caller's dict),
  read and checked by :func:`read_header` before the rest is touched;
* ``tree``: UTF-8 JSON of the saved object, with numpy arrays replaced by references to
* ``a0``, ``a1``, ...: the arrays, numeric dtypes only (``np.load(..., allow_pickle=False)``: an object array
  is refused by numpy itself).

Besides JSON's own types the tree holds tuples, dicts with non-string keys, numpy scalars of numeric dtypes and
dataclasses of an explicit allow-list the caller passes (``types``: name -> class, built from its fields, no code
of the file's choosing).  Anything else is refused when saving (:class:`TypeError`) and when loading
(:class:`StateFormatError`): a file that is not of this format is never decoded.
"""
from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

__all__ = ["dumps", "read_header", "read_body", "StateFormatError", "FORMAT", "SUFFIX"]

FORMAT = "specverify-state-v1"  # the header's "format": what this module writes and reads
SUFFIX = ".npz"
_NUMERIC = "biufc"  # numpy dtype kinds allowed: bool, int, uint, float, complex (never object, void, str)


class StateFormatError(ValueError):
    """A saved-state file that is not of this format (or is damaged): it is ignored, never decoded."""


def _encode(x, arrays: list, types: Mapping[str, type]):
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in _NUMERIC:
            raise TypeError(f"saved state holds only numeric arrays; got dtype {x.dtype}")
        arrays.append(x)
        return {"__nd__": len(arrays) - 1}
    if isinstance(x, np.generic):
        if x.dtype.kind not in _NUMERIC:
            raise TypeError(f"saved state holds only numeric scalars; got dtype {x.dtype}")
        return {"__np__": x.dtype.str, "v": x.item() if x.dtype.kind != "c" else [x.real.item(), x.imag.item()]}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        name = type(x).__name__
        if types.get(name) is not type(x):
            raise TypeError(f"saved state holds only the dataclasses {sorted(types)}; got {name}")
        return {"__dc__": name, "f": {f.name: _encode(getattr(x, f.name), arrays, types)
                                      for f in dataclasses.fields(x)}}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, arrays, types) for v in x]}
    if isinstance(x, list):
        return [_encode(v, arrays, types) for v in x]
    if isinstance(x, dict):
        return {"__dict__": [[_encode(k, arrays, types), _encode(v, arrays, types)] for k, v in x.items()]}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"saved state holds plain data, numeric arrays and dataclasses; got {type(x).__name__}")


def dumps(header: dict, obj, types: Optional[Mapping[str, type]] = None) -> bytes:
    """The bytes of a state file holding ``header`` (JSON data) and ``obj``."""
    arrays: list = []
    tree = _encode(obj, arrays, dict(types or {}))
    head = json.dumps({**header, "format": FORMAT}).encode()
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(head, np.uint8), tree=np.frombuffer(json.dumps(tree).encode(), np.uint8),
             **{f"a{i}": a for i, a in enumerate(arrays)})
    return buf.getvalue()


def _member(z, name: str) -> np.ndarray:
    try:
        _check_declared_size(z, name)
        return z[name]
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError, MemoryError) as e:
        raise StateFormatError(f"no readable {name!r} ({type(e).__name__}: {e})") from None


def _check_declared_size(z, name: str) -> None:
    """Refuse a member whose .npy header declares more bytes than the member holds (numpy would allocate what the
    header says first: a 16-byte member claiming a terabyte is a MemoryError, not a state file)."""
    info = z.zip.getinfo(f"{name}.npy")
    with z.zip.open(info) as f:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared > info.file_size:
        raise ValueError(f"its header declares {declared:,} bytes; the member holds {info.file_size:,}")


def _json_member(z, name: str):
    a = _member(z, name)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise StateFormatError(f"{name!r} is not UTF-8 JSON bytes")
    try:
        return json.loads(a.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StateFormatError(f"{name!r} is not UTF-8 JSON ({e})") from None


def _open(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise StateFormatError(f"not a state file ({type(e).__name__}: {e})") from None


def read_header(path: Path) -> dict:
    """The header of state file ``path`` (nothing else is decoded); StateFormatError when it is not one."""
    z = _open(path)
    try:
        if not hasattr(z, "files"):
            raise StateFormatError("not an .npz archive")
        head = _json_member(z, "header")
    finally:
        if hasattr(z, "close"):
            z.close()
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StateFormatError(f"header format is not {FORMAT!r}")
    return head


def _decode(x, arrays, types: Mapping[str, type]):
    if isinstance(x, list):
        return [_decode(v, arrays, types) for v in x]
    if not isinstance(x, dict):
        return x
    if set(x) == {"__nd__"}:
        a = arrays(x["__nd__"])
        if a.dtype.kind not in _NUMERIC:
            raise StateFormatError(f"array of dtype {a.dtype}")
        return a
    if set(x) == {"__np__", "v"}:
        dt = np.dtype(str(x["__np__"])) if str(x["__np__"])[1:2] in _NUMERIC else None
        if dt is None:
            raise StateFormatError(f"scalar of dtype {x['__np__']!r}")
        return dt.type(complex(*x["v"]) if dt.kind == "c" else x["v"])
    if set(x) == {"__dc__", "f"}:
        cls = types.get(x["__dc__"])
        if cls is None:
            raise StateFormatError(f"dataclass {x['__dc__']!r} is not one of {sorted(types)}")
        fields = {k: _decode(v, arrays, types) for k, v in x["f"].items()}
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        obj = cls(**{k: v for k, v in fields.items() if k in init})
        for k, v in fields.items():
            if k not in init:
                setattr(obj, k, v)
        return obj
    if set(x) == {"__tuple__"}:
        return tuple(_decode(v, arrays, types) for v in x["__tuple__"])
    if set(x) == {"__dict__"}:
        return {_decode(k, arrays, types): _decode(v, arrays, types) for k, v in x["__dict__"]}
    raise StateFormatError(f"unknown node with keys {sorted(x)[:4]}")


def read_body(path: Path, types: Optional[Mapping[str, type]] = None):
    """The object saved in state file ``path`` (call after :func:`read_header` accepted its header)."""
    z = _open(path)
    try:
        tree = _json_member(z, "tree")

        def arrays(i):
            if not isinstance(i, int) or isinstance(i, bool):
                raise StateFormatError(f"array reference {i!r}")
            return _member(z, f"a{i}")
        return _decode(tree, arrays, dict(types or {}))
    except (TypeError, KeyError, ValueError) as e:
        if isinstance(e, StateFormatError):
            raise
        raise StateFormatError(f"damaged tree ({type(e).__name__}: {e})") from None
    finally:
        z.close()
