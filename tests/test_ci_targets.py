"""Every test of tests/ runs in some target that .ci/run calls (issue 26: `make test` deselects the slow tests, and
some ran nowhere, so one of them rotted unseen).

`make test` runs every test that is neither slow nor vllm-marked; install-check, ray-check, engine-check and
vllm-check run every test of their files (``*_TESTS`` in the Makefile); `make test-slow` runs every other slow test.
Read statically (the Makefile, .ci/run and the test files' marks): no collection, no subprocess."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OTHER_TARGETS = {"install-check": "INSTALL_TESTS", "ray-check": "RAY_TESTS", "engine-check": "ENGINE_TESTS",
                 "vllm-check": "VLLM_TESTS", "openvino-check": "OPENVINO_TESTS", "mistralrs-check": "MISTRALRS_TESTS"}


def _makefile() -> tuple[dict, dict]:
    """(variables set with :=, target -> its recipe lines) of the Makefile."""
    text = (ROOT / "Makefile").read_text()
    variables = {m.group(1): m.group(2).split() for m in re.finditer(r"^([A-Z_]+) :=(.*)$", text, re.M)}
    recipes, target = {}, None
    for line in text.splitlines():
        m = re.match(r"^([a-z][a-z-]*):", line)
        if m:
            target = m.group(1)
            recipes[target] = []
        elif line.startswith("\t") and target is not None:
            recipes[target].append(line.strip())
        elif line and not line.startswith("#"):
            target = None
    return variables, recipes


def _ci_targets() -> list[str]:
    return re.findall(r"^make ([a-z-]+)", (ROOT / ".ci" / "run").read_text(), re.M)


def _files_marked(mark: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
            if re.search(rf"pytest\.mark\.{mark}\b", p.read_text())}


def test_ci_runs_every_target_that_runs_tests():
    _, recipes = _makefile()
    testing = sorted(t for t, lines in recipes.items() if any("-m pytest" in ln and "benchmarks" not in ln
                                                              for ln in lines))
    assert {"test", "test-slow", *OTHER_TARGETS} <= set(testing)
    assert set(testing) <= set(_ci_targets()), "a target that runs tests is not called by .ci/run"


def test_test_slow_runs_every_slow_test_no_other_target_runs():
    variables, recipes = _makefile()
    theirs = set()
    for target, var in OTHER_TARGETS.items():
        assert any(f"$({var})" in ln for ln in recipes[target]), (target, var)
        files = variables[var]
        assert files and all((ROOT / f).is_file() for f in files), (var, files)
        theirs |= set(files)
    (line,) = [ln for ln in recipes["test-slow"] if "-m pytest" in ln]
    assert "-m slow" in line and "--ignore=$(f)" in line
    ignored = re.search(r"\$\(foreach f,(.*?),--ignore=\$\(f\)\)", line).group(1)
    assert {v for v in re.findall(r"\$\(([A-Z_]+)\)", ignored)} == set(OTHER_TARGETS.values())
    assert _files_marked("slow") - theirs, "no slow test left for test-slow: this check has nothing to check"
    assert "not slow and not vllm" in " ".join(recipes["test"])


def test_vllm_tests_live_where_vllm_check_runs_them():
    variables, _ = _makefile()
    assert _files_marked("vllm") <= set(variables["VLLM_TESTS"])


def test_openvino_tests_live_where_openvino_check_runs_them():
    variables, recipes = _makefile()
    assert _files_marked("openvino") and _files_marked("openvino") <= set(variables["OPENVINO_TESTS"])
    assert "not openvino" in " ".join(recipes["test"])


def test_mistralrs_tests_live_where_mistralrs_check_runs_them():
    variables, recipes = _makefile()
    assert _files_marked("mistralrs") and _files_marked("mistralrs") <= set(variables["MISTRALRS_TESTS"])
    assert "not mistralrs" in " ".join(recipes["test"])
