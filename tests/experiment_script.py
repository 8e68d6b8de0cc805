"""Load a script of experiments/ as a module, for the tests of its functions (one loader for every test file)."""
import importlib.util
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_experiment(name: str):
    """experiments/<name>.py as module ``name`` (registered in sys.modules, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
