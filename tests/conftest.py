"""Shared test settings.

Hypothesis runs derandomized (its examples come from a fixed seed derived from each test), so a CI
run is reproducible and no seed is ever picked by looking at a result.  ``HYPOTHESIS_PROFILE=dev``
explores with fresh random examples and more of them.
"""
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from harness.laws.scenarios import SCENARIO_DIR

# Tests mirror the packages (tests/stats/, tests/verify/, ...; feature tests at the top).  Helpers shared across
# folders (shard_samplers, test_sweep's settings) are imported by module name: every folder is on the path.
_TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(_TESTS)] + sorted(str(d) for d in _TESTS.iterdir() if d.is_dir() and not d.name.startswith(("_", ".")))

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The test machines have 2 shared cores.  Intra-op threads on a loaded box make small tensor ops
# wait for a descheduled sibling thread (measured: 10-50x slower); tests use one thread.
torch.set_num_threads(1)


TINY = """description = "V=4 bigram, k=2, 4 tokens (tests)"
k = 2
max_new_tokens = 4
joint_tokens = 2
[target]
vocab_size = 4
seed = 7
[draft]
eps = 0.4
"""


@pytest.fixture(scope="module")
def scen_dir(tmp_path_factory):
    """A scenario folder: the shipped default.toml and ``tiny.toml`` (:data:`TINY`), for fast verifications."""
    d = tmp_path_factory.mktemp("scenarios")
    shutil.copy(SCENARIO_DIR / "default.toml", d / "default.toml")
    (d / "tiny.toml").write_text(TINY)
    return d
