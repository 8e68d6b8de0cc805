"""Shared test settings.

Hypothesis runs derandomized (its examples come from a fixed seed derived from each test), so a CI
run is reproducible and no seed is ever picked by looking at a result.  ``HYPOTHESIS_PROFILE=dev``
explores with fresh random examples and more of them.
"""
import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The test machines have 2 shared cores.  Intra-op threads on a loaded box make small tensor ops
# wait for a descheduled sibling thread (measured: 10-50x slower); tests use one thread.
torch.set_num_threads(1)
