"""Provenance of a result (config, seed, commit, versions, machine) and atomic writes.

Every result file the harness writes carries :func:`metadata`: the experiment's config, the seed,
the git commit (and whether the tree was dirty), library versions and a description of the
machine (CPU, core count, load average, GPU if any).  Writes go to a temporary file in the target
directory and are moved into place with ``os.replace``, so a reader never sees half a file and an
interrupted run leaves the previous result intact.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

__all__ = ["metadata", "git_commit", "versions", "machine", "atomic_write_bytes", "atomic_write_text",
           "atomic_write_json", "atomic_write_parquet", "atomic_write_csv", "atomic_savefig",
           "metadata_text"]

# The source checkout this package runs from, if any: an installed copy (site-packages) has no .git
# beside it, and then no commit is claimed (never the commit of some repository that happens to enclose it).
_REPO = Path(__file__).resolve().parent.parent


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


def machine() -> dict:
    """CPU model, cores visible to this process, torch threads, load average, memory, GPU."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
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
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "__dataclass_fields__"):
        return _jsonable({k: getattr(x, k) for k in x.__dataclass_fields__})
    return repr(x)


def metadata(config: dict, seed) -> dict:
    """Provenance record for one result: config, seed, commit, versions, machine, UTC timestamp."""
    return {
        "config": _jsonable(config),
        "seed": _jsonable(seed),
        **git_commit(),
        "versions": versions(),
        "machine": machine(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


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
    """DataFrame -> CSV; ``meta`` is written as leading '# provenance: {json}' comment line.

    Read back with ``pandas.read_csv(path, comment='#')``.
    """
    head = f"# provenance: {json.dumps(_jsonable(meta))}\n" if meta is not None else ""
    return atomic_write_text(path, head + df.to_csv(index=False))


def atomic_savefig(fig, path, meta: Optional[dict] = None, **kwargs) -> Path:
    """Save a matplotlib figure atomically; ``meta`` goes into the PNG's text chunks and a footer."""
    path = Path(path)
    if meta is not None:
        fig.text(0.005, 0.005, metadata_text(meta), fontsize=5, color="0.4", ha="left", va="bottom")
    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    pil_meta = {"provenance": json.dumps(_jsonable(meta))} if (meta is not None and fmt == "png") else None
    fig.savefig(buf, format=fmt, metadata=pil_meta, **kwargs)
    return atomic_write_bytes(path, buf.getvalue())
