"""Content fingerprints: a hash of what produced a result, so saved state is reused only for the same code.

Saved state (a verify run's draw shards, a calibrate seed, a sweep cell) is keyed on a fingerprint of

* the project's own code: every ``.py`` and ``.toml`` file of the installed ``harness`` and ``specimpl``
  packages (by content, so uncommitted edits count, and no ``.git`` is needed: :func:`code_fingerprint`);
* the sampler's source (:func:`sampler_fingerprint`): for a sampler loaded from ``file.py:fn``, that
  file's bytes; for ``package.module:fn``, every ``.py`` file of its top-level package (or the module's
  own file when it is not in a package; for a third-party package installed in site-packages, its
  version and the module's file); and every imported module from outside the standard library,
  site-packages and this project (:func:`user_module_files`: the helpers a sampler file imports); and, recorded
  with each shard of draws by the process that drew it, the files of every such module loaded by then (a helper
  imported inside the sampler's call included: :func:`loaded_module_files`, checked on resume by
  :func:`changed_module_files`);
* the resolved configuration (a scenario dataclass, a cell's settings: canonical JSON, :func:`canonical`),
  the seed and the draw counts — whatever the caller passes to :func:`fingerprint`.

A saved result whose fingerprint differs from the current one was made by other code or settings: it is
ignored and recomputed, never reused.  Fingerprints are hex SHA-256 digests; :func:`short` gives the
8-character form printed in reports.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

__all__ = ["fingerprint", "canonical", "code_fingerprint", "sampler_fingerprint", "files_fingerprint", "short",
           "PROJECT_PACKAGES", "user_module_files", "loaded_module_files", "changed_module_files", "file_sha256"]

PROJECT_PACKAGES = ("harness", "specimpl")
_SUFFIXES = (".py", ".toml")


def short(fp: Optional[str]) -> str:
    """The first 8 hex digits of a fingerprint (``'unknown'`` for None)."""
    return fp[:8] if fp else "unknown"


def _plain(x):
    """``x`` as plain JSON data: dataclasses as dicts, tuples as lists, numpy scalars as numbers."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in x]
        return sorted(items, key=repr) if isinstance(x, (set, frozenset)) else items
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return repr(x)


def canonical(obj) -> str:
    """Canonical JSON of ``obj`` (sorted keys, dataclasses expanded): equal settings give equal text."""
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"), default=repr)


def fingerprint(*parts) -> str:
    """SHA-256 of the canonical JSON of ``parts``."""
    return hashlib.sha256(canonical(list(parts)).encode()).hexdigest()


def files_fingerprint(files: Iterable[Path], root: Optional[Path] = None) -> str:
    """SHA-256 over the (relative name, bytes) of ``files``, in sorted order."""
    h = hashlib.sha256()
    for path in sorted(Path(f) for f in files):
        name = path.relative_to(root).as_posix() if root is not None else path.name
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _package_files(pkg_dir: Path, suffixes=_SUFFIXES) -> list[Path]:
    return [p for p in pkg_dir.rglob("*") if p.suffix in suffixes and p.is_file() and "__pycache__" not in p.parts]


def code_fingerprint() -> str:
    """Fingerprint of the project's own code: every .py and .toml file of the installed ``harness`` and
    ``specimpl`` packages, by content (relative names included)."""
    h = hashlib.sha256()
    for name in PROJECT_PACKAGES:
        pkg_dir = Path(sys.modules[name].__file__ if name in sys.modules else
                       __import__(name).__file__).resolve().parent
        h.update(name.encode() + b"=" + files_fingerprint(_package_files(pkg_dir), pkg_dir).encode())
    return h.hexdigest()


def _unwrap(fn):
    """The function behind a wrapper (``__wrapped__``, e.g. verify's guard), a partial, a bound method."""
    for _ in range(10):
        if getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        elif isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        else:
            break
    return fn


def _source_files(fn) -> tuple[str, list[Path], Optional[Path]]:
    """(how it was found, the files, their root) of the source of callable ``fn``."""
    fn = _unwrap(fn)
    holder = fn if (inspect.isfunction(fn) or inspect.isclass(fn)) else type(fn)
    mod_name = getattr(holder, "__module__", None) or ""
    top = mod_name.split(".")[0]
    top_mod = sys.modules.get(top)
    if "." in mod_name and top_mod is not None and getattr(top_mod, "__path__", None):
        roots = [Path(p).resolve() for p in top_mod.__path__]
        if any(part in ("site-packages", "dist-packages") for part in roots[0].parts) and top not in PROJECT_PACKAGES:
            # an installed third-party package: its version and the module's own file (not thousands of files)
            mod_file = getattr(sys.modules.get(mod_name), "__file__", None)
            return (f"installed {top} {getattr(top_mod, '__version__', None)}",
                    [Path(mod_file).resolve()] if mod_file else [], None)
        return f"package {top}", [f for r in roots for f in _package_files(r, (".py",))], roots[0].parent
    code = getattr(holder, "__code__", None)
    src = code.co_filename if code is not None else None
    if src is None:
        mod = sys.modules.get(mod_name)
        src = getattr(mod, "__file__", None)
    if src is None:
        try:
            src = inspect.getsourcefile(holder)
        except TypeError:
            src = None
    if src and Path(src).is_file():
        return f"file {Path(src).name}", [Path(src).resolve()], None
    return f"unreadable source of {getattr(holder, '__qualname__', repr(holder))}", [], None


def _library_dirs() -> tuple[Path, ...]:
    """Where the interpreter's standard library and installed packages live."""
    import sysconfig
    paths = sysconfig.get_paths()
    dirs = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(dirs | {Path(sys.base_prefix).resolve() / "lib"}))


def user_module_files() -> list[Path]:
    """The source files of every imported module that is neither the standard library, nor an installed
    package (site-packages), nor this project's own packages (those are in :func:`code_fingerprint`):
    a sampler file and whatever it imports from beside it (``from helper import gen``)."""
    libs = _library_dirs()
    out = set()
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f or name in ("__main__", "__mp_main__") or name.split(".")[0] in PROJECT_PACKAGES or not f.endswith(".py"):
            continue
        path = Path(f).resolve()
        if any(part in ("site-packages", "dist-packages") for part in path.parts) or \
                any(path.is_relative_to(d) for d in libs) or not path.is_file():
            continue
        out.add(path)
    return sorted(out)


def sampler_fingerprint(fn: Callable) -> str:
    """Fingerprint of a sampler's source: the file it was defined in (``--sampler file.py:fn``) or every
    .py file of its top-level package (``package.module:fn``), its qualified name, and every module
    imported from outside the standard library, site-packages and this project (:func:`user_module_files`:
    a helper the sampler file imports is code that draws too; not for the project's own samplers, whose
    code is :func:`code_fingerprint`'s, nor installed packages).  A callable whose source cannot be read is
    fingerprinted by its name and those modules.  A module the sampler imports only later, inside a call,
    is not seen here: the process that draws records it with the draws (:func:`loaded_module_files`), and a
    resumed run checks those files again (:func:`changed_module_files`) before it reuses the draws."""
    if isinstance(getattr(fn, "plugin_fingerprint", None), str):  # computed where it was imported (a PluginSampler)
        return fn.plugin_fingerprint
    how, name, files, root, helpers = _sampler_parts(fn)
    return fingerprint(how, name, files_fingerprint(files, root) if files else None,
                       [[str(f), files_fingerprint([f])] for f in helpers])


def _sampler_parts(fn: Callable) -> tuple:
    """(how the source was found, qualified name, its files, their root, the helper modules it imported)."""
    how, files, root = _source_files(fn)
    name = getattr(_unwrap(fn), "__qualname__", type(fn).__qualname__)
    own = how.startswith("package ") and how.split()[1] in PROJECT_PACKAGES
    own = own or bool(files) and all(any(p in f.parts for p in PROJECT_PACKAGES) and f.is_relative_to(
        Path(__file__).resolve().parents[2]) for f in files)
    helpers = [] if own or how.startswith("installed ") else [f for f in user_module_files() if f not in set(files)]
    return how, name, files, root, helpers


def sampler_sources(fn: Callable) -> dict:
    """Each source file :func:`sampler_fingerprint` covers (the sampler's own and its helpers), path -> its
    fingerprint: what a resumed run compares to name the file that changed."""
    if isinstance(getattr(fn, "plugin_sources", None), dict):
        return dict(fn.plugin_sources)
    _, _, files, _, helpers = _sampler_parts(fn)
    return {str(f): files_fingerprint([f]) for f in [*files, *helpers]}


# ------------------------------------------------------------------ modules a sampler imports while it runs
_HASHES: dict = {}  # (path, mtime_ns, size) -> SHA-256 of the file (per process)
_LOADED: list = [-1, {}]  # [len(sys.modules) when last computed, its {path: SHA-256}]


def file_sha256(path) -> Optional[str]:
    """SHA-256 of a regular file's bytes (cached on its mtime and size); None when it cannot be read or is not a
    regular file (a FIFO, a device such as /dev/zero: never opened, it could block or never end)."""
    import stat as _stat
    try:
        st = Path(path).stat()
        if not _stat.S_ISREG(st.st_mode):
            return None
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _HASHES:
            _HASHES[key] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return _HASHES[key]
    except OSError:
        return None


def loaded_module_files() -> dict[str, str]:
    """Path -> SHA-256 of every module loaded in this process from outside the standard library, site-packages
    and this project (:func:`user_module_files`), recomputed only when ``sys.modules`` grew.  A worker sends it
    back with each shard, so a helper that the sampler imports *inside* its call (which
    :func:`sampler_fingerprint`, computed before any call, cannot see) is recorded with the draws it made and
    checked again (:func:`changed_module_files`) before a resumed run reuses them."""
    if _LOADED[0] != len(sys.modules):
        _LOADED[1] = {str(p): file_sha256(p) for p in user_module_files()}
        _LOADED[0] = len(sys.modules)
    return dict(_LOADED[1])


def changed_module_files(modules) -> list[str]:
    """Of ``modules`` (path -> SHA-256, as :func:`loaded_module_files` recorded them), the paths whose file now
    differs, is gone or cannot be read (all of them when ``modules`` is not such a mapping)."""
    if modules is None:
        return []
    if not isinstance(modules, dict):
        return ["(unreadable module list)"]
    return sorted(str(p) for p, h in modules.items() if not isinstance(p, str) or file_sha256(p) != h)
