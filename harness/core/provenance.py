"""Provenance of a result (config, seed, commit, versions, machine) and atomic writes.

Every result file the harness writes carries :func:`metadata`: the format's ``schema_version``, the
experiment's config, the seed, the git commit (and whether the tree was dirty), library versions, a
description of the machine (CPU, core count, load average, GPU if any) and the command that made it.

Where it goes: a JSON result carries it as its object (``meta.json``), a parquet file in its schema metadata
(key ``provenance``), a PNG in a text chunk, and a CSV in a sidecar beside it, ``<name>.csv.meta.json``
(:func:`sidecar_path`), so that ``pandas.read_csv(path)`` and ``csv.DictReader`` read the CSV's real columns.
CSVs written before the sidecar (a first line ``# provenance: {json}``) are still read
(:func:`read_provenance`, :func:`read_table_csv`); ``experiments/migrate_csv_provenance.py`` converts them.

Provenance is portable (:func:`portable`): a path is recorded relative to the repository or the working
directory, the home directory as ``~``, a Python environment as ``<venv>``, the temporary directory as
``<tmp>``, and any other absolute path as ``<abs>/`` and its last two components (system paths such as
``/dev/null`` or ``/usr/bin/time`` stay as they are) -- never as the absolute path of the machine that made
it; the command is recorded as it is typed (``python -m harness verify ...``, :func:`command_line`).

Writes go to a temporary file in the target directory and are moved into place with ``os.replace``, so
a reader never sees half a file and an interrupted run leaves the previous result intact.  Figures are
reproducible: the same figure and provenance give the same bytes (no creation date in PDF or SVG).

Readers check the version back: every reader of a stored result (the sweep's report, a tune folder's
tables, the sweep's resume, ``roofline.local --profiles``) calls :func:`check_schema` (or
:func:`checked_provenance`) and refuses a ``schema_version`` outside :data:`SCHEMA_VERSIONS_READ` with one
line naming the file (exit 2).  A file without ``schema_version`` predates versioning and is read as before.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from harness.core.errors import UsageError
from harness.core import jsonfile

__all__ = ["SCHEMA_VERSION", "SCHEMA_VERSIONS_READ", "check_schema", "read_provenance", "checked_provenance", "metadata", "git_commit", "versions", "machine", "portable", "portable_tree", "command_line",
           "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_write_parquet",
           "atomic_write_csv", "sidecar_path", "read_table_csv", "atomic_savefig", "metadata_text"]

# Version of the layout of result files and their metadata; raise it when a reader would misread old files.
# 1: schema_version added; paths relative; `command` as typed (python -m ...).
SCHEMA_VERSION = 1
# The versions the readers (report, tune's folders, the sweep's resume, ...) understand.  A file whose
# provenance has no ``schema_version`` was written before versioning (``results_line`` shows it as schema 0)
# and is read as it always was: the readers accepted such files before versions existed, and still do.
SCHEMA_VERSIONS_READ = (1,)

# The source checkout this package runs from, if any: an installed copy (site-packages) has no .git
# beside it, and then no commit is claimed (never the commit of some repository that happens to enclose it).
_REPO = Path(__file__).resolve().parents[2]


def git_commit(repo: Path = _REPO) -> dict:
    """{'commit': sha or None, 'dirty': bool or None} of the working tree holding this package."""
    def _git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
    if not (Path(repo) / ".git").exists():
        return {"commit": None, "dirty": None}
    try:
        sha = _git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        st = _git("status", "--porcelain", "--untracked-files=no")
        return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def versions() -> dict:
    """Versions of Python and the libraries results depend on (None when not installed)."""
    out = {"python": platform.python_version()}
    from importlib import metadata as _md
    for mod, dist in (("torch", "torch"), ("numpy", "numpy"), ("scipy", "scipy"), ("pandas", "pandas"),
                      ("pyarrow", "pyarrow"), ("matplotlib", "matplotlib"), ("transformers", "transformers")):
        m = sys.modules.get(mod)  # the version actually imported, else the installed one (no import)
        if m is not None and getattr(m, "__version__", None):
            out[mod] = m.__version__
            continue
        try:
            out[mod] = _md.version(dist)
        except _md.PackageNotFoundError:
            out[mod] = None
    return out


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_tile")


def _simd_flags() -> list[str]:
    """The vector extensions of /proc/cpuinfo that change which kernels torch and numpy pick."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in SIMD_FLAGS if x in have]
    except OSError:
        pass
    return []


def _torch_cpu_capability() -> Optional[str]:
    """ATen's CPU kernel set (DEFAULT / AVX2 / AVX512; ATEN_CPU_CAPABILITY overrides it), if torch is loaded:
    float32 exp / softmax / cumsum differ in their last bit between these, so the exact-law scenarios' float32
    tables -- and a few draws in millions -- depend on it (README: what reproduces across machines)."""
    torch = sys.modules.get("torch")
    try:
        return str(torch.backends.cpu.get_cpu_capability()) if torch is not None else None
    except AttributeError:
        return None


_CNR_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
_CNR_STRICT = 0x10000


def mkl_cnr() -> Optional[str]:
    """The conditional-numerical-reproducibility branch MKL applies in this process (``MKL_CBWR`` asks for one; MKL
    may fall back: ``AVX2`` on an AMD CPU gives ``AUTO``), read from torch's statically linked MKL, e.g.
    ``"COMPATIBLE,STRICT"``; None without torch or MKL.  The real-model forwards' float32 GEMMs sum in the branch's
    order: under COMPATIBLE (the same code on every x86 CPU) and STRICT (the same result at any thread count)
    they give the same bits on every machine."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.backends.mkl.is_available():
        return None
    try:
        import ctypes
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    torch.ones(2, 2) @ torch.ones(2, 2)  # MKL reads MKL_CBWR at its first call
    mode = get(-1)  # MKL_CBWR_ALL: the branch and the STRICT flag
    return _CNR_BRANCHES.get(mode & 0xFFFF, str(mode & 0xFFFF)) + (",STRICT" if mode & _CNR_STRICT else "")


KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def _numpy_simd() -> Optional[list[str]]:
    """numpy's dispatched kernel sets in use (X86_V3 = AVX2, X86_V4 / AVX512_* = AVX-512; NPY_DISABLE_CPU_FEATURES
    removes some): float64 reductions sum in another order under each, a last-bit difference in a few statistics."""
    np_umath = sys.modules.get("numpy._core._multiarray_umath")
    if np_umath is None:
        return None
    return [f for f in getattr(np_umath, "__cpu_dispatch__", []) if getattr(np_umath, "__cpu_features__", {}).get(f)]


def machine() -> dict:
    """CPU model and vector extensions, torch's CPU kernel set, cores visible to this process, torch threads,
    load average, memory, GPU."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_simd": _simd_flags(),
        "torch_cpu_capability": _torch_cpu_capability(),
        "mkl_cnr": mkl_cnr(),
        "numpy_simd": _numpy_simd(),
        "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
        "cpu_count": os.cpu_count(),
    }
    try:
        info["cpus_available"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["cpus_available"] = os.cpu_count()
    try:
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        info["loadavg_1_5_15"] = None
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        info["memory_gib"] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "__dataclass_fields__"):
        return _jsonable({k: getattr(x, k) for k in x.__dataclass_fields__})
    return repr(x)


# -- portable paths ---------------------------------------------------------------------------
def _roots() -> list[tuple[str, str]]:
    """(absolute prefix, what replaces it), first match wins: the repository, the working directory, the home
    directory, the running Python environment (a venv), the temporary directory."""
    out = []
    if (_REPO / ".git").exists() or (_REPO / "pyproject.toml").exists():
        out.append((_REPO, ""))
    try:
        out.append((Path.cwd(), ""))
    except OSError:
        pass
    try:
        out.append((Path.home(), "~"))
    except (KeyError, RuntimeError):
        pass
    if sys.prefix != sys.base_prefix:
        out.append((Path(sys.prefix), "<venv>"))
    out.append((Path(tempfile.gettempdir()), "<tmp>"))
    out.append((Path("/tmp"), "<tmp>"))
    roots = []
    for path, repl in out:
        for form in dict.fromkeys((str(path), os.path.realpath(path))):
            if form != os.sep:
                roots.append((form.rstrip(os.sep), repl))
    return roots


# Absolute paths that name the same thing on every machine (devices, the system's own programs): kept as given.
SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/", "/usr/", "/bin/", "/sbin/", "/etc/", "/lib/")


def _outside(value: str) -> str:
    """A path outside every root of :func:`_roots`: ``<venv>/...`` inside another Python environment (a folder
    with ``pyvenv.cfg``), a system path as it is, else ``<abs>/`` and its last two components."""
    if value.startswith(SYSTEM_PREFIXES) or value in {p.rstrip("/") for p in SYSTEM_PREFIXES}:
        return value
    path = Path(value)
    for parent in path.parents:
        try:
            if parent != Path(os.sep) and (parent / "pyvenv.cfg").is_file():
                return "<venv>/" + path.relative_to(parent).as_posix()
        except OSError:
            break
    return "<abs>/" + "/".join(path.parts[1:][-2:])


def portable(value):
    """``value`` with a leading absolute path made portable: relative to the repository (first) or the
    working directory, the home directory as ``~``, the running venv as ``<venv>``, the temporary directory
    as ``<tmp>``, any other path as ``<abs>/`` and its last two components (:func:`_outside`); other values
    unchanged.  ``--opt=/abs/path`` and ``/abs/path[suffix]`` work too."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        return value
    if value.startswith("-") and "=" in value:
        opt, _, rest = value.partition("=")
        return f"{opt}={portable(rest)}"
    if not value.startswith(os.sep):
        return value
    for root, repl in _roots():
        if value == root:
            return repl or "."
        if value.startswith(root + os.sep):
            rest = value[len(root) + 1:]
            return f"{repl}/{rest}" if repl else rest
    return _outside(value)


def portable_tree(x):
    """:func:`portable` applied to every string of a JSON-like tree (dicts, lists)."""
    if isinstance(x, dict):
        return {k: portable_tree(v) for k, v in x.items()}
    if isinstance(x, list):
        return [portable_tree(v) for v in x]
    return portable(x)


def _program(argv0: str) -> str:
    """How the running program is typed: ``python -m pkg.mod`` for a module of a package, else the script's
    portable path after ``python`` (or the bare name of an executable such as ``pytest``)."""
    if argv0 in ("", "-c", "-"):
        return f"python {argv0}".strip()
    path = Path(argv0)
    if path.suffix != ".py":
        return path.name
    parts = [] if path.stem == "__main__" else [path.stem]
    d = path.resolve().parent
    while (d / "__init__.py").exists():
        parts.insert(0, d.name)
        d = d.parent
    if parts and (path.resolve().parent / "__init__.py").exists():
        return "python -m " + ".".join(parts)
    return "python " + portable(str(path.resolve()))


def command_line(argv=None) -> str:
    """The command that made a result, as typed: ``python -m harness verify --out results/x`` (paths
    portable, arguments shell-quoted)."""
    argv = list(sys.argv if argv is None else argv) or [""]
    return " ".join([_program(argv[0])] + [_quote(portable(a)) for a in argv[1:]])


def _quote(arg: str) -> str:
    """``shlex.quote``, but a placeholder prefix (``<tmp>/x``, ``--out=<abs>/a/b``) is left readable."""
    for mark in ("<tmp>/", "<venv>/", "<abs>/"):
        head, sep, rest = arg.partition(mark)
        if sep and (not head or (head.startswith("-") and head.endswith("="))) and shlex.quote(rest) == rest:
            return arg
    return shlex.quote(arg)


def metadata(config: dict, seed) -> dict:
    """Provenance record for one result: schema version, config, seed, commit, versions, machine, UTC
    timestamp, command.  Paths in ``config`` are recorded portably (:func:`portable`)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "config": portable_tree(_jsonable(config)),
        "seed": _jsonable(seed),
        **git_commit(),
        "versions": versions(),
        "machine": machine(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }


# -- reading provenance back -------------------------------------------------------------------
def check_schema(meta, path, regenerate: Optional[str] = None) -> None:
    """Refuse a result file whose provenance ``meta`` names a ``schema_version`` this harness does not read.

    ``meta`` is the file's provenance (a dict; None or a record without ``schema_version``: a file older
    than versioning, accepted as before).  Raises :class:`harness.core.errors.UsageError` (exit 2) with one
    line naming ``path``, the version found and :data:`SCHEMA_VERSIONS_READ`, and how to regenerate the file
    (``regenerate``, else the ``command`` recorded in ``meta``)."""
    if not isinstance(meta, dict) or "schema_version" not in meta:
        return
    found = meta["schema_version"]
    if isinstance(found, int) and not isinstance(found, bool) and found in SCHEMA_VERSIONS_READ:
        return
    how = regenerate or meta.get("command") or "the harness command that made it"
    shown = portable(str(path))
    shown = str(path) if shown.startswith("<") else shown  # an error names a path the user can open
    raise UsageError(f"{shown}: schema_version {found!r} is not one this harness reads "
                     f"({', '.join(map(str, SCHEMA_VERSIONS_READ))}); regenerate it with `{how}`")


def sidecar_path(path) -> Path:
    """Where the provenance of the CSV ``path`` is kept: ``<name>.csv.meta.json`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".meta.json")


LEGACY_CSV_PREFIX = "# provenance:"


def _legacy_csv_provenance(path: Path):
    """The ``# provenance: {json}`` first line of a CSV written before sidecars (None when it has none)."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    return json.loads(first[len(LEGACY_CSV_PREFIX):]) if first.startswith(LEGACY_CSV_PREFIX) else None


def read_provenance(path) -> Optional[dict]:
    """The provenance stored for result file ``path``, or None when it carries none: a JSON file's object
    (``meta.json``), a CSV's sidecar ``<name>.csv.meta.json`` (or, for a CSV written before sidecars, its
    leading ``# provenance: {json}`` line), a parquet file's ``provenance`` schema metadata.  A provenance
    that does not parse is treated as none (the table itself is read as before)."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            meta = jsonfile.loads(path.read_text())
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq
            raw = (pq.read_schema(path).metadata or {}).get(b"provenance")
            meta = jsonfile.loads(raw) if raw is not None else None
        elif sidecar_path(path).is_file():
            meta = jsonfile.loads(sidecar_path(path).read_text())
        else:
            meta = _legacy_csv_provenance(path)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def read_table_csv(path, **kwargs):
    """``pandas.read_csv(path, **kwargs)``, skipping the ``# provenance:`` first line of a CSV written before
    sidecars (a field holding ``#`` is read as it is, unlike with ``comment='#'``)."""
    import pandas as pd
    with open(path, encoding="utf-8") as f:
        legacy = f.readline().startswith(LEGACY_CSV_PREFIX)
    return pd.read_csv(path, skiprows=1 if legacy else None, **kwargs)


def checked_provenance(path, regenerate: Optional[str] = None) -> Optional[dict]:
    """:func:`read_provenance` of ``path``, refused by :func:`check_schema` when its version is unknown."""
    meta = read_provenance(path)
    check_schema(meta, path, regenerate)
    return meta


def metadata_text(meta: dict) -> str:
    """One short line for figure footers: commit, seed, versions, machine."""
    v = meta.get("versions", {})
    m = meta.get("machine", {})
    commit = (meta.get("commit") or "unknown")[:10] + ("+dirty" if meta.get("dirty") else "")
    return (f"commit {commit} · seed {meta.get('seed')} · torch {v.get('torch')} numpy {v.get('numpy')} "
            f"scipy {v.get('scipy')} · {m.get('cpu')} ({m.get('cpus_available')} cores, load "
            f"{(m.get('loadavg_1_5_15') or ['?'])[0]})")


# -- atomic writes ----------------------------------------------------------------------------
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="_tmp" + path.name + ".", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> Path:
    return atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def atomic_write_parquet(path, df, meta: Optional[dict] = None) -> Path:
    """DataFrame -> parquet; ``meta`` is stored as JSON in the file's schema metadata (key 'provenance')."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(df, preserve_index=False)
    if meta is not None:
        md = dict(table.schema.metadata or {})
        md[b"provenance"] = json.dumps(_jsonable(meta)).encode()
        table = table.replace_schema_metadata(md)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return atomic_write_bytes(path, buf.getvalue())


def atomic_write_csv(path, df, meta: Optional[dict] = None) -> Path:
    """DataFrame -> CSV holding only the table (``pandas.read_csv(path)`` reads its real columns); ``meta``
    goes to the sidecar :func:`sidecar_path` (``<name>.csv.meta.json``), written first.  Without ``meta`` a
    sidecar left beside ``path`` by an earlier write is removed (it would describe another table)."""
    side = sidecar_path(path)
    if meta is not None:
        atomic_write_json(side, meta)
    elif side.is_file():
        side.unlink()
    return atomic_write_text(path, df.to_csv(index=False))


# Formats whose writers stamp the time of writing, and the metadata key that stops it.
_DATE_KEYS = {"pdf": "CreationDate", "svg": "Date", "ps": "CreationDate", "eps": "CreationDate"}


def _figure_metadata(fmt: str, meta: Optional[dict]) -> Optional[dict]:
    if fmt == "png":
        return {"provenance": json.dumps(_jsonable(meta))} if meta is not None else None
    return {_DATE_KEYS[fmt]: None} if fmt in _DATE_KEYS else None


def atomic_savefig(fig, path, meta: Optional[dict] = None, **kwargs) -> Path:
    """Save a matplotlib figure atomically; ``meta`` goes into the PNG's text chunks and a footer.

    Reproducible: no creation date is written (PDF, SVG, PS), ``SOURCE_DATE_EPOCH`` is fixed to 0 when
    unset and SVG ids are salted with a constant, so the same figure and ``meta`` give the same bytes."""
    path = Path(path)
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")
    if meta is not None:
        fig.text(0.005, 0.005, metadata_text(meta), fontsize=5, color="0.4", ha="left", va="bottom")
    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    import matplotlib
    with matplotlib.rc_context({"svg.hashsalt": "harness"}):  # SVG ids: a fixed salt, not a random one
        fig.savefig(buf, format=fmt, metadata=_figure_metadata(fmt, meta), **kwargs)
    return atomic_write_bytes(path, buf.getvalue())
