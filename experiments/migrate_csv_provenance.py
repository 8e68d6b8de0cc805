"""Migrate committed result files to the current layout: CSV provenance in a sidecar, no machine paths.

A mechanical format change of files already made, never a regeneration (every number stays as it is):

1. **CSV provenance to a sidecar** (issue 40): a CSV whose first line is ``# provenance: {json}`` loses that
   line, and the same record goes to ``<name>.csv.meta.json`` beside it (the sidecar the writers now write,
   :func:`harness.core.provenance.sidecar_path`); the rest of the CSV is kept byte for byte.  A report
   manifest (``.<kind>-manifest.json``) that lists the CSV lists its sidecar too.
2. **No absolute path of the machine that made a result** (issue 45): every absolute path in a text file
   (JSON, CSV, Markdown, log), in a parquet file's ``provenance`` metadata and in a PNG's text chunks is
   written the way :func:`harness.core.provenance.portable` now records one (:func:`neutral_path`): a path
   inside a checkout of this repository relative to it, the home directory as ``~``, a Python environment
   as ``<venv>``, the temporary directory as ``<tmp>``, any other path as ``<abs>/`` and its last two
   components.  System paths (``/usr/bin/time``, ``/dev/null``) stay.

Idempotent: a second run changes nothing.  Usage (from the repository root)::

    python experiments/migrate_csv_provenance.py            # migrate every git-tracked file under results/
    python experiments/migrate_csv_provenance.py --check    # exit 1 if any file would change, write nothing
"""
from __future__ import annotations

import argparse
import io
import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.provenance import LEGACY_CSV_PREFIX, atomic_write_bytes, atomic_write_json, sidecar_path  # noqa: E402

# What the machine's directories look like: the roots of absolute paths found in results/.
PATH_RE = re.compile(r"(?<![\w.~<>/\\-])/(?:home|work|tmp|root|opt|mnt|srv|scratch|data|Users|nfs)"
                     r"(?![\w-])[^\s\"'`,;:()\[\]{}|\\<>*]*")
# Names at the top of a checkout of this repository that identify one (a path through one of them is read
# relative to it), and names that do only under a checkout already identified (``/work/main/.venv/bin/python``).
CHECKOUT_ENTRIES = {"results", "specimpl", "harness", "experiments", "benchmarks"}
CHECKOUT_ONLY_ENTRIES = {"build", "runs", "docs", "tests", "Makefile", "README.md", "pyproject.toml"}
TEXT_SUFFIXES = {".json", ".csv", ".md", ".log", ".tex", ".txt"}


def _checkout_index(parts: list[str], checkouts: frozenset = frozenset()) -> int | None:
    """Index of the first part, at depth two or more, that is a top-level entry of a checkout of this
    repository (``/work/main/results/x`` -> 3; ``build/membound_pair``, the exact pair's build folder, too);
    a generic entry (``.venv*``, ``build``, ``tests``, ...) only under one of ``checkouts``; else None."""
    for i, part in enumerate(parts[2:], start=2):
        if part in CHECKOUT_ENTRIES or parts[i:i + 2] == ["build", "membound_pair"]:
            return i
        if (part in CHECKOUT_ONLY_ENTRIES or part.startswith(".venv")) and "/".join(parts[:i]) in checkouts:
            return i
    return None


def neutral_path(path: str, checkouts: frozenset = frozenset()) -> str:
    """The portable form of absolute ``path`` recorded on another machine (no file system is consulted):
    relative to the checkout of this repository it lies in (a bare checkout root in ``checkouts`` is ``.``),
    ``<venv>/bin/...`` inside a Python environment, ``<tmp>/...``, ``~/...`` for a home directory, else
    ``<abs>/`` and its last two components."""
    trail = len(path) - len(path.rstrip("."))  # a full stop that ends a sentence is not part of the path
    path, tail = path[:len(path) - trail], path[len(path) - trail:]
    parts = path.split("/")  # ['', 'work', 'main', ...]
    if path.rstrip("/") in checkouts:
        return "." + tail
    i = _checkout_index(parts, checkouts)
    if i is not None:
        return "/".join(parts[i:]) + tail
    for j, part in enumerate(parts[:-1]):
        if j >= 2 and parts[j + 1] == "bin" and (part.endswith("env") or part.startswith(".venv")):
            return "/".join(["<venv>", *parts[j + 1:]]) + tail
    if parts[1] == "tmp":
        return "/".join(["<tmp>", *parts[2:]]) + tail
    if parts[1] == "home" and len(parts) > 2:
        return "/".join(["~", *parts[3:]]) + tail
    if parts[1] == "root":
        return "/".join(["~", *parts[2:]]) + tail
    return "<abs>/" + "/".join([p for p in parts[1:] if p][-2:]) + tail


def neutral_text(text: str, checkouts: frozenset = frozenset()) -> tuple[str, int]:
    """``text`` with every absolute machine path made neutral (:func:`neutral_path`); and how many."""
    count = 0

    def sub(m):
        nonlocal count
        count += 1
        return neutral_path(m.group(0), checkouts)
    return PATH_RE.sub(sub, text), count


def checkout_roots(texts) -> frozenset:
    """The checkouts of this repository named in ``texts``: the prefixes before a top-level entry."""
    roots = set()
    for text in texts:
        for m in PATH_RE.finditer(text):
            parts = m.group(0).split("/")
            i = _checkout_index(parts)
            if i is not None:
                roots.add("/".join(parts[:i]))
    return frozenset(roots)


# -- one file each ------------------------------------------------------------------------------------
def split_csv(path: Path) -> bool:
    """Move a CSV's ``# provenance:`` first line into its sidecar; True when the file changed."""
    data = path.read_bytes()
    if not data.startswith(LEGACY_CSV_PREFIX.encode()):
        return False
    first, _, rest = data.partition(b"\n")
    meta = json.loads(first[len(LEGACY_CSV_PREFIX):].decode("utf-8"))
    side = sidecar_path(path)
    if side.exists() and json.loads(side.read_text()) != meta:
        raise SystemExit(f"{side}: exists and differs from the provenance line of {path}; not overwritten")
    atomic_write_json(side, meta)
    atomic_write_bytes(path, rest)
    return True


def list_sidecars_in_manifest(path: Path) -> bool:
    """Add the sidecar of each CSV a report manifest lists (when it exists); True when the file changed."""
    man = json.loads(path.read_text())
    files = set(man.get("files", []))
    more = {f + ".meta.json" for f in files if f.endswith(".csv") and sidecar_path(path.parent / f).is_file()}
    if more <= files:
        return False
    man["files"] = sorted(files | more)
    atomic_write_bytes(path, (json.dumps(man, indent=1) + "\n").encode())
    return True


def rewrite_text(path: Path, checkouts) -> int:
    text = path.read_text(encoding="utf-8")
    new, n = neutral_text(text, checkouts)
    if new != text:
        atomic_write_bytes(path, new.encode("utf-8"))
    return n if new != text else 0


def rewrite_parquet(path: Path, checkouts) -> int:
    """Neutral paths in a parquet file's ``provenance`` metadata (the table itself is unchanged)."""
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    md = dict(table.schema.metadata or {})
    raw = md.get(b"provenance")
    if raw is None:
        return 0
    new, n = neutral_text(raw.decode("utf-8"), checkouts)
    if new == raw.decode("utf-8"):
        return 0
    md[b"provenance"] = new.encode("utf-8")
    buf = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(md), buf)  # the writers' own call (atomic_write_parquet)
    assert pq.read_table(io.BytesIO(buf.getvalue())).equals(table)
    atomic_write_bytes(path, buf.getvalue())
    return n


def png_chunks(data: bytes):
    """(type, body) of each chunk of a PNG file."""
    i = 8
    while i < len(data):
        (size,) = struct.unpack(">I", data[i:i + 4])
        yield data[i + 4:i + 8], data[i + 8:i + 8 + size]
        i += 12 + size


def rewrite_png(path: Path, checkouts) -> int:
    """Neutral paths in a PNG's ``tEXt`` chunks (the image is unchanged)."""
    data = path.read_bytes()
    out, total = [data[:8]], 0
    for kind, body in png_chunks(data):
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            new, n = neutral_text(text.decode("latin-1"), checkouts)
            if n:
                total += n
                body = key + b"\0" + new.encode("latin-1")
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)))
    new_data = b"".join(out)
    if new_data != data:
        atomic_write_bytes(path, new_data)
        return total
    return 0


# -- the whole tree --------------------------------------------------------------------------------
def tracked_files(root: Path) -> list[Path]:
    """The git-tracked files under ``root`` (every file, outside a git checkout)."""
    ls = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", str(root)], capture_output=True, timeout=60)
    if ls.returncode == 0 and ls.stdout:
        return [REPO / p for p in ls.stdout.decode().split("\0") if p]
    return sorted(p for p in root.rglob("*") if p.is_file())


def _texts(files):
    for f in files:
        if f.suffix in TEXT_SUFFIXES:
            yield f.read_text(encoding="utf-8")


def migrate(root: Path, files: list[Path] | None = None) -> dict:
    """Migrate ``files`` (default: every tracked file under ``root``); returns the counts (CSVs split,
    manifests extended, paths rewritten and the files holding them, the checkouts recognised)."""
    files = tracked_files(root) if files is None else files
    counts = {"csv_split": 0, "manifests": 0, "paths": 0, "files_with_paths": 0}
    for f in files:
        if f.suffix == ".csv" and split_csv(f):
            counts["csv_split"] += 1
    files = sorted(set(files) | {sidecar_path(f) for f in files if f.suffix == ".csv" and sidecar_path(f).is_file()})
    for f in files:
        if f.name.startswith(".") and f.name.endswith("-manifest.json") and list_sidecars_in_manifest(f):
            counts["manifests"] += 1
    checkouts = checkout_roots(_texts(files))
    for f in files:
        if f.suffix in TEXT_SUFFIXES:
            n = rewrite_text(f, checkouts)
        elif f.suffix == ".parquet":
            n = rewrite_parquet(f, checkouts)
        elif f.suffix == ".png":
            n = rewrite_png(f, checkouts)
        else:
            n = 0
        counts["paths"] += n
        counts["files_with_paths"] += bool(n)
    counts["checkouts"] = sorted(checkouts)
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO / "results", help="folder to migrate (default results/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"error: --root {str(args.root)!r} is not a folder", file=sys.stderr)
        return 2
    if args.check:  # migrate a copy and count
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "results"
            shutil.copytree(args.root, copy)
            counts = migrate(copy, [copy / f.relative_to(args.root) for f in tracked_files(args.root)])
        print(json.dumps(counts))
        return 1 if counts["csv_split"] + counts["manifests"] + counts["files_with_paths"] else 0
    print(json.dumps(migrate(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
