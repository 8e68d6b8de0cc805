"""experiments/migrate_csv_provenance.py: a CSV's provenance line moves to its sidecar (the rest byte for byte),
manifests list the sidecars, machine paths become neutral everywhere (JSON, CSV, parquet, PNG), and a second
run changes nothing."""
from __future__ import annotations

import importlib.util
import json
import struct
import zlib
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mig():
    spec = importlib.util.spec_from_file_location("migrate_csv_provenance", REPO / "experiments" / "migrate_csv_provenance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path, neutral", [
    ("/work/main/results/sweep/x", "results/sweep/x"),
    ("/tmp/wt/build/membound_pair/target", "build/membound_pair/target"),
    ("/tmp/wt/build/x", "<tmp>/wt/build/x"),  # a generic name only under a known checkout
    ("/home/alice/tests/x", "~/tests/x"),
    ("/work/main/.venv-vllm/bin/python", ".venv-vllm/bin/python"),
    ("/work/vllm-env/bin/python", "<venv>/bin/python"),
    ("/tmp/llama-out/plain/samples.jsonl", "<tmp>/llama-out/plain/samples.jsonl"),
    ("/home/alice/runs/a", "~/runs/a"),
    ("/work/stage_engines/work/hf.jsonl", "<abs>/work/hf.jsonl"),
    ("/work/main", "."),
    ("/tmp/byhand.", "<tmp>/byhand."),
])
def test_neutral_path(mig, path, neutral):
    assert mig.neutral_path(path, frozenset({"/work/main"})) == neutral


def _png(text: str) -> bytes:
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", bytes(13)) + chunk(b"tEXt", b"provenance\0" + text.encode())
            + chunk(b"IEND", b""))


def test_migrate_a_folder_twice(mig, tmp_path):
    from harness.core.provenance import atomic_write_parquet, read_provenance
    root = tmp_path / "results"
    (root / "v").mkdir(parents=True)
    meta = {"commit": "a" * 40, "dirty": False, "command": "python -m harness verify --out /tmp/v-out",
            "config": {"out": "/work/main/results/v", "model": "/opt/models/big/llama"}}
    (root / "v" / "runs.csv").write_text("# provenance: " + json.dumps(meta) + "\nrun,verdict\nbase,certified\n")
    (root / "v" / ".verify-manifest.json").write_text(json.dumps({"kind": "verify", "files": ["runs.csv"]}, indent=1))
    (root / "v" / "summary.md").write_text("made by `python -m harness verify --out /tmp/v-out`; /usr/bin/time -v\n")
    atomic_write_parquet(root / "v" / "t.parquet", pd.DataFrame({"a": [1.5]}), meta)
    (root / "v" / "f.png").write_bytes(_png(json.dumps(meta)))
    files = sorted(p for p in root.rglob("*") if p.is_file())
    counts = mig.migrate(root, files)
    assert counts["csv_split"] == 1 and counts["manifests"] == 1 and counts["files_with_paths"] == 4  # sidecar, md, parquet, png
    assert (root / "v" / "runs.csv").read_text() == "run,verdict\nbase,certified\n"
    side = json.loads((root / "v" / "runs.csv.meta.json").read_text())
    assert side["command"] == "python -m harness verify --out <tmp>/v-out"
    assert side["config"] == {"out": "results/v", "model": "<abs>/big/llama"} and side["commit"] == "a" * 40
    assert json.loads((root / "v" / ".verify-manifest.json").read_text())["files"] == ["runs.csv", "runs.csv.meta.json"]
    assert (root / "v" / "summary.md").read_text() == "made by `python -m harness verify --out <tmp>/v-out`; /usr/bin/time -v\n"
    assert read_provenance(root / "v" / "t.parquet")["config"]["out"] == "results/v"
    assert pd.read_parquet(root / "v" / "t.parquet").a.tolist() == [1.5]
    assert b"<tmp>/v-out" in (root / "v" / "f.png").read_bytes() and b"/tmp/" not in (root / "v" / "f.png").read_bytes()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    again = mig.migrate(root, sorted(before))
    assert again["csv_split"] == again["manifests"] == again["paths"] == 0
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
