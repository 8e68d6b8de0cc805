"""A transformers checkpoint -> OpenVINO IR (float32, with its tokenizer), by optimum-intel's own exporter run in
the engine's environment, cached by the checkpoint's content.

    python -m harness.samples.engines.openvino_export exact            # prints the IR folder (exports when missing)
    python -m harness.samples.engines.openvino_export exact-draft --python .venv-openvino/bin/python

The export is part of what is tested: nothing exported is committed.  :func:`export` runs
``optimum-cli export openvino --task text-generation-with-past --weight-format fp32`` with the OpenVINO
environment's Python (``make openvino-venv``; optimum-intel is not a dependency of the harness) into a cache
folder named by the SHA-256 of the checkpoint's files and the export options (``$SPECVERIFY_OPENVINO_CACHE``,
default ``~/.cache/specverify/openvino``), written to a staging folder and renamed into place, so a folder
that exists is a whole export of exactly those bytes.  Each folder holds ``specverify-export.json``: the
source's hash, the command's options and the exporter's versions.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core.errors import SamplerError, UsageError
from harness.core.models import resolve_model

__all__ = ["EXPORT_ARGS", "content_key", "cache_root", "export", "main"]

EXPORT_ARGS = ("--task", "text-generation-with-past", "--weight-format", "fp32")
STAMP = "specverify-export.json"
_VERSIONS = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
             "('optimum-intel', 'optimum', 'openvino', 'openvino-tokenizers', 'transformers', 'torch')}))")


def content_key(model_dir) -> str:
    """SHA-256 (hex, 16 digits) of the checkpoint's files (names and bytes, sorted) and :data:`EXPORT_ARGS`."""
    h = hashlib.sha256(json.dumps(EXPORT_ARGS).encode())
    for p in sorted(Path(model_dir).iterdir()):
        if p.is_file():
            h.update(p.name.encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """``$SPECVERIFY_OPENVINO_CACHE``, else ``~/.cache/specverify/openvino``."""
    return Path(os.environ.get("SPECVERIFY_OPENVINO_CACHE") or Path.home() / ".cache" / "specverify" / "openvino")


def _check_python(python: str) -> None:
    if not Path(python).exists():
        raise UsageError(f"`--openvino-python` must be the Python of an environment with openvino-genai and "
                         f"optimum-intel (make openvino-venv); got {python!r}, which does not exist")


def export(model_dir, python: str, timeout: float = 900.0) -> Path:
    """The OpenVINO IR folder of ``model_dir`` (a transformers checkpoint), exported now when the cache lacks it.
    SamplerError (exit 3) when the exporter fails, with the last lines of its output."""
    _check_python(python)
    src = Path(model_dir).resolve()
    key = content_key(src)
    dest = cache_root() / f"{src.name}-{key}"
    if (dest / STAMP).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        cmd = [python, "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", str(src), *EXPORT_ARGS,
               str(stage / "ir")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not (stage / "ir" / "openvino_model.xml").exists():
            tail = " | ".join([x for x in (p.stderr or p.stdout).strip().splitlines() if x.strip()][-3:])
            raise SamplerError(f"optimum-cli export openvino of {str(src)!r} failed (exit {p.returncode}): {tail[:400]}")
        versions = json.loads(subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True,
                                             check=True).stdout)
        stamp = {"source": src.name, "sha256_16": key, "exporter": "optimum-cli export openvino",
                 "options": list(EXPORT_ARGS), "versions": versions}
        (stage / "ir" / STAMP).write_text(json.dumps(stamp, indent=1))
        try:
            os.replace(stage / "ir", dest)
        except OSError:  # another process exported the same bytes first: keep its folder
            if not (dest / STAMP).exists():
                raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a checkpoint folder or a shipped name (python -m harness models)")
    ap.add_argument("--python", default=os.environ.get("SPECVERIFY_OPENVINO_PYTHON", ".venv-openvino/bin/python"))
    args = ap.parse_args(argv)
    try:
        print(export(resolve_model(args.model, "model"), args.python))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SamplerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
