"""Where a plug-in sampler runs, how long it may take, and what is said when it ends its worker.

The process that decides ``verify``'s exit status never runs a plug-in sampler (code from outside the project:
``--sampler file.py:fn`` or ``pkg.module:fn``): with ``--workers 1`` its tasks run on one worker process
(:func:`backend_for`), as they do on every core otherwise, so a sampler that calls ``os._exit(0)``, ``exit()`` in C
code, or kills its own process ends its worker, never the command, and the run ends in exit 3 naming the sampler
and what it did (:func:`lost_message`).  A sampler task that runs past its limit (:func:`task_timeout`:
``--sampler-timeout``, by default :data:`AUTO_TIMEOUT_S` plus :data:`SECONDS_PER_TOKEN` per token it draws) has its
worker stopped and ends the run the same way.
"""
from __future__ import annotations

from typing import Callable, Optional

from harness.core.backends import Backend, LocalPool, SerialBackend, TaskLost
from harness.core.fingerprint import PROJECT_PACKAGES

__all__ = ["lost_message", "not_from_generator", "is_plugin_task", "task_timeout", "import_timeout", "backend_for", "AUTO_TIMEOUT_S", "SECONDS_PER_TOKEN",
           "describe_timeout"]

AUTO_TIMEOUT_S = 600.0  # the default limit of one sampler task, plus SECONDS_PER_TOKEN per token it draws
SECONDS_PER_TOKEN = 0.01  # 10 ms a token: ~12x the tiny transformer pair's 0.8 ms, ~60,000x the n-gram scenarios'


def lost_message(lost: TaskLost, what: str) -> str:
    """The run's error when the worker drawing ``what`` (e.g. "shard 3") was lost: timed out, exited by itself,
    or killed."""
    if lost.timed_out is not None:
        return (f"SamplerTimeout: the sampler did not return within {lost.timed_out:g} s while drawing {what} "
                f"(--sampler-timeout); its worker process was stopped")
    if lost.exitcode is not None and lost.exitcode >= 0:
        return (f"SamplerExit: the sampler ended its worker process with exit status {lost.exitcode} while drawing "
                f"{what} (os._exit, or exit() in C code)")
    tries = f"{lost.attempts} time{'s' * (lost.attempts != 1)}"
    return f"WorkerLost: the worker drawing {what} {lost.reason} ({tries})"


def not_from_generator(label: str, differ: int, total: int) -> str:
    """The one line of a sampler whose output does not follow from its ``generator`` (the determinism check)."""
    return (f"the sampler {label}'s output does not follow from its `generator`: two calls with generators of the "
            f"same seed gave different tokens ({differ:,} of {total:,} differ), so it draws from a global RNG "
            f"(torch.rand without generator=, numpy.random, random) or os.urandom; its draws would then depend on "
            f"the worker count (workers can repeat each other's draws) and could not be resumed; pass `generator` "
            f"to every random call")


def is_plugin_task(task) -> bool:
    """Whether ``task`` runs a sampler from outside the project (its recipe: a file, a pickle, or an importable
    module or ``--sampler`` value outside :data:`harness.core.fingerprint.PROJECT_PACKAGES`)."""
    recipe = getattr(task, "sampler", None)
    if not isinstance(recipe, tuple) or getattr(task, "is_baseline", False):
        return False
    kind = recipe[0]
    if kind in ("file", "pickle"):
        return True
    if kind == "spec":
        module = str(recipe[1]).rsplit(":", 1)[0]
        return module.endswith(".py") or module.split(".")[0] not in PROJECT_PACKAGES
    return kind == "import" and str(recipe[1]).split(".")[0] not in PROJECT_PACKAGES


def task_timeout(sampler_timeout: Optional[float]) -> Callable[[object], Optional[float]]:
    """The limit in seconds of each task: for a task that calls the sampler under test or a control (not a
    target-only baseline, not the exact law), ``sampler_timeout`` (0: none), by default :data:`AUTO_TIMEOUT_S` +
    :data:`SECONDS_PER_TOKEN` x the tokens it draws; None for the others."""
    def limit(task) -> Optional[float]:
        if not isinstance(getattr(task, "sampler", None), tuple) or getattr(task, "is_baseline", False):
            return None
        if sampler_timeout is not None:
            return float(sampler_timeout) if sampler_timeout > 0 else None
        return AUTO_TIMEOUT_S + SECONDS_PER_TOKEN * getattr(task, "positions", 0)
    return limit


def import_timeout(sampler_timeout: Optional[float]) -> Optional[float]:
    """The limit in seconds of the trial import of a ``--sampler`` module
    (:func:`harness.verify.sampler.trial_import`): ``--sampler-timeout`` (0: none), by default
    :data:`AUTO_TIMEOUT_S`."""
    if sampler_timeout is None:
        return AUTO_TIMEOUT_S
    return float(sampler_timeout) if sampler_timeout > 0 else None


def describe_timeout(sampler_timeout: Optional[float]) -> str:
    """The limit in words, for the report's provenance."""
    if sampler_timeout is None:
        return f"{AUTO_TIMEOUT_S:g} s + {SECONDS_PER_TOKEN:g} s per token of each sampler task"
    return "none" if sampler_timeout <= 0 else f"{sampler_timeout:g} s per sampler task"


def backend_for(backend: Backend, tasks: list) -> tuple[Backend, bool]:
    """The backend that draws ``tasks``: ``backend``, or one worker process when ``backend`` runs in this process
    with ``isolate_plugins`` and a task runs a plug-in sampler; and whether the caller must close it."""
    if isinstance(backend, SerialBackend) and backend.isolate_plugins and any(map(is_plugin_task, tasks)):
        return LocalPool(1), True
    return backend, False
