"""The transformers lower bound: pyproject.toml declares the version specimpl.hf checks, and an older
transformers fails at once with a message naming both versions."""
import re
import tomllib
from pathlib import Path

import pytest

from specimpl.hf import MIN_TRANSFORMERS, require_transformers

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_bound_is_the_one_hf_checks():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bound = [d for d in deps if d.replace(" ", "").startswith("transformers")]
    assert bound == [f"transformers>={MIN_TRANSFORMERS}"]


def test_older_transformers_is_refused_with_both_versions(monkeypatch):
    transformers = pytest.importorskip("transformers")
    assert require_transformers() is transformers  # the installed one is recent enough
    monkeypatch.setattr(transformers, "__version__", "5.12.0")
    with pytest.raises(ImportError, match=rf"`transformers` must be version >= {re.escape(MIN_TRANSFORMERS)} "
                                          r".*got '5\.12\.0'"):
        require_transformers()
    pre = f"{MIN_TRANSFORMERS}.dev0"  # a pre-release of the bound is older than the bound
    monkeypatch.setattr(transformers, "__version__", pre)
    with pytest.raises(ImportError, match=re.escape(repr(pre))):
        require_transformers()
