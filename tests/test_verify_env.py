"""The kernel pins of `make verify` (the Makefile's VERIFY_ENV) are applied, not only set (issue 42.4).

Setting a variable is not enough: MKL ignores ``MKL_CBWR=AVX2`` on an AMD CPU (it falls back to AUTO, and the
real-model forwards then sum in a CPU-specific order).  This test runs a Python under VERIFY_ENV, as `make verify`
does, and reads what each library applied -- ATen's kernel set, the branch MKL reports
(:func:`harness.core.provenance.mkl_cnr`), numpy's dispatched kernel sets -- and fails when one differs from the
pin.  It can fail: without VERIFY_ENV, this machine's MKL reports OFF (checked below too)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import json, torch, numpy; from harness.core.provenance import machine; print(json.dumps(machine()))"


def _verify_env() -> dict:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (line,) = re.findall(r"^VERIFY_ENV \?=(.*)$", text, re.M)
    return dict(kv.split("=", 1) for kv in line.split())


def _machine(env: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_every_pin_of_verify_env_is_applied():
    env = _verify_env()
    assert set(env) >= {"ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "MKL_CBWR"}
    m = _machine(env)
    assert m["torch_cpu_capability"] == env["ATEN_CPU_CAPABILITY"].upper()
    assert m["mkl_cnr"] == env["MKL_CBWR"], f"MKL applies {m['mkl_cnr']!r}, VERIFY_ENV asks for {env['MKL_CBWR']!r}"
    assert not [f for f in m["numpy_simd"] if f.startswith("AVX512") or f == "X86_V4"]
    assert m["kernel_env"]["MKL_CBWR"] == env["MKL_CBWR"]  # and the provenance records it


def test_without_the_pin_mkl_reports_another_branch():
    """The check above can fail: the same probe without MKL_CBWR reads a branch other than the pin's."""
    assert _machine({})["mkl_cnr"] != _verify_env()["MKL_CBWR"]


def test_the_real_runs_experiment_pins_what_make_verify_pins():
    """experiments/inconclusive_real_runs.py runs `verify` itself: its copy of VERIFY_ENV is the Makefile's."""
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import inconclusive_real_runs as exp
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    assert exp.VERIFY_ENV == _verify_env()
