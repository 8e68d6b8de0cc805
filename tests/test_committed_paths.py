"""No committed file under results/ names a directory of the machine that made it (issue 45): paths are
repository-relative, or neutral (``~``, ``<venv>``, ``<tmp>``, ``<abs>/...``), as
:func:`harness.core.provenance.portable` records them.  Text files are read whole; a parquet file's schema
metadata and string columns, a PNG's text chunks and any other file's raw bytes are searched too."""
from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout (e.g. an installed copy)")

# The roots of machine paths (home and work directories, temporary folders, mounts); system paths such as
# /usr/bin/time or /dev/null name the same thing on every machine and are allowed.
MACHINE_PATH = re.compile(r"(?<![\w.~<>/\\-])/(?:home|work|tmp|root|opt|mnt|srv|scratch|data|Users|nfs|var/tmp|"
                          r"var/folders)(?![\w-])")
TEXT = {".json", ".csv", ".md", ".log", ".tex", ".txt"}


def _committed() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "results"], capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def _searchable(path: Path) -> str:
    """The text of ``path`` in which a path could be recorded."""
    if path.suffix in TEXT:
        return path.read_text(encoding="utf-8")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        table = pq.read_table(path)
        meta = " ".join(v.decode("utf-8", "replace") for v in (table.schema.metadata or {}).values())
        cols = [str(x) for c in table.column_names if str(table.schema.field(c).type) in ("string", "large_string")
                for x in table.column(c).to_pylist()]
        return meta + "\n" + "\n".join(cols)
    data = path.read_bytes()
    if path.suffix == ".png":
        chunks, i = [], 8
        while i < len(data):
            (size,) = struct.unpack(">I", data[i:i + 4])
            if data[i + 4:i + 8] in (b"tEXt", b"iTXt"):
                chunks.append(data[i + 8:i + 8 + size].decode("latin-1"))
            i += 12 + size
        return "\n".join(chunks)
    return data.decode("latin-1")


def test_the_pattern_finds_machine_paths():
    """The check can fail (a test that cannot fail is a defect)."""
    for s in ('"out": "/tmp/x"', "--out=/work/stage/a", "`/home/me/d`", "git clone /work/main /tmp/b", "in /tmp."):
        assert MACHINE_PATH.search(s), s
    for s in ("<tmp>/x", "<abs>/stage/a", "~/d", "results/tune/x", "/usr/bin/time -v", "http://h/data/x",
              "<venv>/bin/python", "/dev/null", "a/tmp/b"):
        assert not MACHINE_PATH.search(s), s


def test_committed_results_name_no_machine_path():
    files = _committed()
    assert len(files) > 500  # the walk is not vacuous
    found = {}
    for rel in files:
        hits = MACHINE_PATH.findall(_searchable(REPO / rel))
        if hits:
            found[rel] = len(hits)
    assert not found, (f"{len(found)} committed files name machine paths (python "
                       f"experiments/migrate_csv_provenance.py rewrites them): {sorted(found)[:10]}")
