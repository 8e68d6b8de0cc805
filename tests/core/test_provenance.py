"""Provenance is portable (no absolute path of the machine that made a result), versioned, and figures are
byte-reproducible."""
import json
import os
from pathlib import Path

import pytest

from harness.core import provenance as pv

REPO = Path(pv.__file__).resolve().parents[2]


def test_metadata_records_no_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(REPO / "harness" / "__main__.py"), "verify", "--out",
                                     str(tmp_path / "out"), f"--config={REPO / 'harness/configs/sweep/gpu.toml'}"])
    config = {"out": REPO / "results" / "hf" / "alpha.csv", "cwd_file": str(tmp_path / "x.csv"),
              "nested": {"model": f"{REPO}/specimpl/assets/tiny_pair/target[:2]"}, "home": str(Path.home() / "d"),
              "name": "default", "k": [1, 2]}
    meta = pv.metadata(config, 7)
    assert meta["schema_version"] == pv.SCHEMA_VERSION >= 1
    text = json.dumps(meta)
    for root in {str(REPO), os.path.realpath(REPO), str(tmp_path), str(Path.home())}:
        assert root + os.sep not in text, root
    assert meta["config"] == {"out": "results/hf/alpha.csv", "cwd_file": "x.csv",
                              "nested": {"model": "specimpl/assets/tiny_pair/target[:2]"}, "home": "~/d",
                              "name": "default", "k": [1, 2]}
    assert meta["command"] == "python -m harness verify --out out --config=harness/configs/sweep/gpu.toml"


@pytest.mark.parametrize("argv0, typed", [
    ("harness/__main__.py", "python -m harness"),
    ("harness/verify/realmodel.py", "python -m harness.verify.realmodel"),
    ("experiments/train_tiny_pair.py", "python experiments/train_tiny_pair.py"),
])
def test_command_is_recorded_as_typed(argv0, typed):
    assert pv.command_line([str(REPO / argv0), "pit", "a b"]) == f"{typed} pit 'a b'"
    assert pv.command_line(["/usr/local/bin/pytest", "-q"]) == "pytest -q"


def test_paths_outside_the_repository_get_a_neutral_form(tmp_path, monkeypatch):
    """No path of the machine that made a result is recorded (issue 45): the temporary directory as
    ``<tmp>``, another Python environment as ``<venv>``, any other absolute path as ``<abs>/`` and its last two
    components; system paths, which name the same thing everywhere, stay."""
    import tempfile
    monkeypatch.chdir(REPO)
    assert pv.portable("/nonexistent-root/a/b/x") == "<abs>/b/x"
    assert pv.portable("/nonexistent-root") == "<abs>/nonexistent-root"
    assert pv.portable(os.path.join(tempfile.gettempdir(), "run", "out")) == "<tmp>/run/out"
    assert pv.portable("/tmp/run/out") == "<tmp>/run/out"
    env = tmp_path / "envs" / "vllm-env"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert pv._outside(str(env / "bin" / "python")) == "<venv>/bin/python"
    assert pv.portable("/usr/bin/time") == "/usr/bin/time" and pv.portable("/dev/null") == "/dev/null"
    assert pv.portable("relative/x") == "relative/x" and pv.portable(3) == 3
    assert pv.portable(str(REPO)) == "."
    assert pv.portable("--out=/tmp/x") == "--out=<tmp>/x"
    assert pv.command_line(["/usr/local/bin/pytest", "--out", "/tmp/a b", "--dir", "/tmp/x", "--vllm=/no/such/env/py"]) \
        == "pytest --out '<tmp>/a b' --dir <tmp>/x --vllm=<abs>/env/py"


def test_a_running_venv_outside_the_repository_is_named_venv(monkeypatch, tmp_path):
    monkeypatch.setattr(pv.sys, "prefix", str(tmp_path / "some-venv"))
    monkeypatch.chdir(REPO)
    assert pv.portable(str(tmp_path / "some-venv" / "bin" / "python")) == "<venv>/bin/python"


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_figures_are_byte_reproducible(tmp_path, fmt):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(path):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        pv.atomic_savefig(fig, path, {"seed": 1, "commit": "abc"})
        plt.close(fig)
        return path.read_bytes()

    first = draw(tmp_path / f"a.{fmt}")
    assert first == draw(tmp_path / f"b.{fmt}")
    assert b"CreationDate" not in first


def test_machine_records_the_kernel_sets_and_their_pins(monkeypatch):
    """What the exact-law tables depend on across machines (README: what reproduces): numpy's dispatched kernel
    sets in use, and the environment variables that pin torch's, numpy's, OpenBLAS's and MKL's kernels."""
    import numpy  # noqa: F401  (loaded: its kernel sets are reported)

    from harness.core.provenance import machine

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    info = machine()
    from numpy._core import _multiarray_umath as umath

    assert info["numpy_simd"] == [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__[f]]
    assert info["kernel_env"]["OPENBLAS_CORETYPE"] == "Haswell" and "MKL_CBWR" not in info["kernel_env"]
