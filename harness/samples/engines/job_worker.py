"""A worker run by an engine's own Python on one JSON job (OpenVINO GenAI, mistral.rs): the job written to a
temporary folder, the worker started in its own process group and stopped with it, its records and summary read
back, and a failure turned into one line naming the engine's error."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from harness.core.errors import SamplerError
from harness.samples.engines.server import stop_group

__all__ = ["root_cause", "run_job"]


def root_cause(log: str) -> str:
    """The engine's error line of a worker's log (a Python error or OpenVINO's failed check, else the last lines)."""
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    for x in lines:
        if x.startswith(("RuntimeError", "ValueError", "TypeError", "Check '", "Fatal Python error")):
            return x.split(" at /", 1)[0][:300]  # the build machine's source path adds nothing
    return " | ".join(lines[-3:])[:300]


def run_job(job: dict, python: str, worker: Path, engine: str, timeout: float) -> tuple[list[dict], dict]:
    """Run ``worker`` with ``python`` on ``job`` (its ``out`` set here); (records as dicts, the worker's summary).
    SamplerError (exit 3) naming ``engine`` and its error when the worker fails or runs past ``timeout``."""
    with tempfile.TemporaryDirectory(prefix=f"specverify-{engine.lower().replace(' ', '').replace('.', '')}-") as tmp:
        job = {**job, "out": str(Path(tmp) / "records.jsonl")}
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        log = Path(tmp) / "worker.log"
        with open(log, "w") as lf:
            proc = subprocess.Popen([python, str(worker), str(path)], stdout=lf, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                stop_group(proc)
        if rc != 0:
            what = ("ran past its timeout" if rc is None else f"was killed by signal {-rc}" if rc < 0
                    else f"exited with status {rc}")
            raise SamplerError(f"the {engine} worker {what}: {root_cause(log.read_text(errors='replace'))}")
        summary = json.loads(Path(job["out"] + ".summary.json").read_text())
        records = [json.loads(x) for x in Path(job["out"]).read_text().splitlines()]
    return records, summary
