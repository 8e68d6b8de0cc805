"""The sampler under test: importing it from a ``--sampler`` value, and checking what one call returns.

A *sampler* is any callable with the signature of :func:`specimpl.speculative_generate`::

    fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator) -> GenerationResult

:func:`load_sampler` is the one place that imports a user's sampler (``python -m harness verify`` and
``python -m harness pit`` both use it); :func:`check_output` is the one check of a call's ``tokens``.

A loaded sampler is wrapped by :func:`guard_sampler`: a ``SystemExit``, or a ``KeyboardInterrupt`` that
is not the user's Ctrl-C, raised inside a call becomes a :class:`SamplerCallError` (an ordinary
exception, so the run records it as the sampler's failure), and every failed call's traceback is kept
(``wrapper.failures``) for the error log.  :func:`sampler_failure` turns a finished run's verdicts
into the :class:`harness.core.errors.SamplerError` (exit 3) when a sampler under test failed.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import os
import traceback
from pathlib import Path
from typing import Callable, Optional

import torch

from harness.core.errors import SamplerError, UsageError, user_interrupted
from harness.core.fingerprint import sampler_fingerprint, sampler_sources
from specimpl.speculative import PAD

__all__ = ["load_sampler", "trial_import", "describe", "PluginSampler", "check_output", "guard_sampler", "sampler_failure", "SamplerSpecError",
           "SamplerOutputError", "SamplerCallError", "SIGNATURE"]

SIGNATURE = "fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator)"

_FORMS = "'package.module:function' or 'path/to/file.py:function'"


class SamplerSpecError(UsageError):
    """Bad ``--sampler`` value (exit 2)."""


class SamplerOutputError(RuntimeError):
    """A sampler call returned something other than the documented ``GenerationResult``."""


class SamplerCallError(RuntimeError):
    """A sampler call ended in ``SystemExit`` or in a ``KeyboardInterrupt`` of its own."""


def load_sampler(spec: str, trial: bool = False, trial_timeout: Optional[float] = 600.0) -> Callable:
    """Import 'package.module:function' (or 'path/to/file.py:function'); errors name ``--sampler``.  ``trial``
    (``verify`` and ``pit``): import it in a child process only (:func:`trial_import`), so that an import that ends
    its process or hangs is a usage error here, not an exit status of its choosing, and return the
    :class:`PluginSampler` that stands for it in this process."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise SamplerSpecError(f"`--sampler` must be {_FORMS}; got {spec!r}")
    mod_name, fn_name = spec.split(":")
    if trial:  # this process never imports it: the child's description stands for it
        return PluginSampler(_portable_spec(mod_name, fn_name), trial_import(spec, trial_timeout))
    mod = _import_file(mod_name, spec) if mod_name.endswith(".py") else _import_module(mod_name, spec)
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise SamplerSpecError(f"`--sampler` must name a function of module {mod_name!r}; got {spec!r} "
                               f"(no attribute {fn_name!r})")
    if not callable(fn):
        raise SamplerSpecError(f"`--sampler` must name a callable; got {spec!r} ({type(fn).__name__})")
    _check_signature(fn, spec)
    guarded = guard_sampler(fn)
    guarded.sampler_spec = _portable_spec(mod_name, fn_name)  # how a worker imports it again (shards.sampler_recipe)
    return guarded


def _portable_spec(mod_name: str, fn_name: str) -> str:
    """The ``--sampler`` value with a file's path made absolute, so that a worker started elsewhere finds it."""
    return f"{Path(mod_name).resolve()}:{fn_name}" if mod_name.endswith(".py") else f"{mod_name}:{fn_name}"


_TRIAL = """
import json, os, sys
from harness.verify.sampler import SamplerSpecError, describe, load_sampler
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # what the sampler's module prints goes to stderr; stdout says only 'ready', the token, the description
out.write("ready\\n")
out.flush()
try:
    fn = load_sampler(sys.argv[1])
except SamplerSpecError as e:
    sys.stderr.write("\\n" + sys.argv[2] + " " + str(e))
    sys.stderr.flush()
    sys.exit(2)
out.write("imported\\n")  # the import is timed up to here (--sampler-timeout); the description after it
out.flush()
out.write(sys.argv[2] + json.dumps(describe(fn)))
out.flush()
"""


def describe(fn: Callable) -> dict:
    """What the deciding process needs to know of a loaded sampler, as data (:class:`PluginSampler`): its names,
    its ``algorithm`` attribute, its fingerprint and its source files' fingerprints."""
    inner = inspect.unwrap(fn)
    algorithm = getattr(inner, "algorithm", None)
    return {"name": str(getattr(inner, "__name__", type(inner).__name__)),
            "qualname": str(getattr(inner, "__qualname__", type(inner).__qualname__)),
            "algorithm": algorithm if algorithm is None or isinstance(algorithm, str) else repr(algorithm),
            "fingerprint": sampler_fingerprint(fn), "sources": sampler_sources(fn)}


class PluginSampler:
    """A ``--sampler`` in the process that decides the verdict, which never imports its module: the trial import
    (:func:`trial_import`, a child process) loaded and checked it and described it (:func:`describe`); its draws run
    on workers, which import ``sampler_spec`` themselves (``("spec", value)``, :func:`harness.verify.shards.
    sampler_recipe`).  So no code of the sampler's module (an import-time patch of the harness, an ``atexit``
    handler, a thread) runs in this process.  Calling it here is a defect of the harness, and raises."""

    def __init__(self, spec: str, description: dict):
        self.sampler_spec = spec
        self.__name__ = description["name"]
        self.__qualname__ = description["qualname"]
        self.algorithm = description["algorithm"]
        self.plugin_fingerprint = description["fingerprint"]
        self.plugin_sources = dict(description["sources"])
        self.failures: list = []  # (summary, traceback) of failed calls: recorded by the workers' own wrappers

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"the sampler {self.sampler_spec!r} draws only on a worker process (it is not imported "
                           "in the process that decides the verdict)")

    def __repr__(self) -> str:
        return f"PluginSampler({self.sampler_spec!r})"
STARTUP_S = 300.0  # the trial child's own start (Python, torch, harness) before the sampler's import is timed


def trial_import(spec: str, timeout: Optional[float] = 600.0) -> dict:
    """Import and check ``--sampler`` ``spec`` in a child process: SamplerSpecError (exit 2, naming ``--sampler``)
    when that fails, ends the child (``os._exit``, ``exit()`` in C code, a signal) before the import is done, or
    takes longer than ``timeout`` seconds (None: no limit; timed from when the child has started, see
    :data:`STARTUP_S`).  Code that runs at import time then cannot end the command that judges the sampler with an
    exit status of its choosing.  Returns the child's :func:`describe` of the loaded sampler."""
    import secrets
    import sys
    token = "specverify-trial-" + secrets.token_hex(8)
    root = str(Path(__file__).resolve().parents[2])
    path = [root, *(p for p in sys.path if p and Path(p).is_dir())]  # this process's imports (as a spawned worker's)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
    code, out, err = _run_trial([sys.executable, "-c", _TRIAL, spec, token], env, timeout)
    if code is None:
        within = f"{timeout:g} s (--sampler-timeout)" if timeout else f"{STARTUP_S:g} s of Python's start"
        raise SamplerSpecError(f"`--sampler`: importing {spec!r} did not finish within {within}")
    if code == 0 and token in out:
        try:
            description = json.loads(out.rsplit(token, 1)[1])
            if isinstance(description, dict) and {"name", "qualname", "algorithm", "fingerprint", "sources"} <= set(
                    description):
                return description
        except ValueError:
            pass
    if code == 2 and token in err:
        raise SamplerSpecError(err.rsplit(token, 1)[1].strip())
    how = (f"exit status {code}" if code >= 0 else f"signal {-code}")
    last = " ".join((err.strip().splitlines() or [""])[-1].split())[:200]
    raise SamplerSpecError(f"`--sampler`: importing {spec!r} ended its process with {how} before the import "
                           f"finished (os._exit, or exit() in C code, at import time){': ' + last if last else ''}")


def _run_trial(cmd: list, env: dict, timeout: Optional[float]) -> tuple:
    """Run the trial child: (exit status, stdout, stderr); the status is None when the import ran past
    ``timeout`` seconds after the child said 'ready', or the child's own start-up (or its description of the
    loaded sampler, :func:`describe`) past :data:`STARTUP_S`."""
    import selectors
    import subprocess
    import tempfile
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                first = proc.stdout.readline() if sel.select(STARTUP_S) else None
                if first is None:
                    return None, "", ""
                ready = first == "ready\n"  # else the child ended before it could start the import
                second = (proc.stdout.readline() if sel.select(timeout) else None) if ready else ""
                if second is None:  # the import itself ran past --sampler-timeout
                    return None, "", ""
            rest, _ = proc.communicate(timeout=STARTUP_S)
            out = ("" if ready else first) + ("" if second == "imported\n" else second) + rest
        except subprocess.TimeoutExpired:
            return None, "", ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        err.seek(0)
        return proc.returncode, out, err.read()


def _check_signature(fn: Callable, spec: str) -> None:
    """Refuse a callable that cannot take the documented call (when its signature can be read)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and the like: left to the call itself
        return
    try:
        sig.bind(None, None, None, k=1, max_new_tokens=2, config=None, eos_token_id=None, generator=None)
    except TypeError as e:
        raise SamplerSpecError(f"`--sampler` {spec!r} must accept {SIGNATURE}; its signature is "
                               f"{getattr(fn, '__name__', 'fn')}{sig} ({e})") from None


def guard_sampler(fn: Callable) -> Callable:
    """``fn`` wrapped so that SystemExit and a sampler's own KeyboardInterrupt raise
    :class:`SamplerCallError`; every failed call's (summary, traceback) is appended to ``.failures``."""
    if hasattr(fn, "failures"):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        pid = os.getpid()
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            if user_interrupted():
                raise
            call.failures.append(("the sampler raised KeyboardInterrupt (not a Ctrl-C of the user)",
                                  traceback.format_exc()))
        except SystemExit as e:
            call.failures.append((f"the sampler called sys.exit({e.code!r})", traceback.format_exc()))
        except Exception as e:
            call.failures.append((f"{type(e).__name__}: {e}", traceback.format_exc()))
            raise
        finally:
            if os.getpid() != pid:  # a child the sampler forked (os.fork) returned or raised out of the call: it
                os._exit(0)         # must never go on as the worker that called it (probe 47, case 8: it did)
        raise SamplerCallError(call.failures[-1][0])

    call.failures = []
    return call


def sampler_failure(verdicts, sampler: Optional[Callable] = None,
                    roles=("reference", "sampler")) -> Optional[SamplerError]:
    """The :class:`SamplerError` of the first run in ``verdicts`` (the rows of runs.csv) whose role is in
    ``roles`` and that ended in an error (None when none did); ``sampler``'s recorded tracebacks (a
    :func:`guard_sampler` wrapper) are its details."""
    if verdicts is None or not len(verdicts) or "error" not in verdicts:
        return None
    bad = verdicts[verdicts.role.isin(roles) & verdicts.error.notna() & (verdicts.error.astype(str) != "")]
    if not len(bad):
        return None
    row = bad.iloc[0]
    first = " ".join(str(row.error).split())[:300]
    more = f" (and {len(bad) - 1} more run(s))" if len(bad) > 1 else ""
    name = f" {row.run}" if isinstance(getattr(row, "run", None), str) and row.run else ""
    summary = f"the sampler{name} failed on scenario {row.scenario!r}{more}: {first}"
    details = "\n".join(tb for _, tb in getattr(sampler, "failures", []))
    if not details:
        details = "\n".join(f"{r.run} on {r.scenario}: {r.error}" for r in bad.itertuples())
    return SamplerError(summary, details)


def _import_file(file_name: str, spec: str):
    path = Path(file_name)
    if not path.is_file():
        raise SamplerSpecError(f"`--sampler` names the file {file_name!r}, which does not exist; got {spec!r}")
    ms = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(ms)
    try:
        ms.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - report any import-time failure of the user's file
        raise SamplerSpecError(f"`--sampler`: importing {file_name!r} failed: {type(e).__name__}: {e}") from None
    return mod


def _import_module(mod_name: str, spec: str):
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise SamplerSpecError(f"`--sampler` must name an importable module; got {spec!r} "
                               f"(No module named {e.name!r})") from None
    except Exception as e:  # noqa: BLE001
        raise SamplerSpecError(f"`--sampler`: importing {mod_name!r} failed: {type(e).__name__}: {e}") from None


def check_output(res, B: int, N: int, V: int, *, pad: bool = True) -> torch.Tensor:
    """The ``tokens`` (B, N) of one sampler call's result, checked: an integer tensor of that shape, of a signed
    dtype wide enough for V - 1 (uint8 wraps PAD = -1 to 255), whose ids lie in [0, V), or are PAD = -1 after a
    sequence's end when ``pad`` (without EOS there is no PAD)."""
    tok = getattr(res, "tokens", None)
    if not torch.is_tensor(tok):
        raise SamplerOutputError(f"the sampler must return a GenerationResult whose `tokens` is a tensor; "
                                 f"got {type(res).__name__} with tokens of type {type(tok).__name__}")
    if tuple(tok.shape) != (B, N) or tok.is_floating_point() or tok.is_complex() or tok.dtype == torch.bool:
        raise SamplerOutputError(f"the sampler's `tokens` must be an integer tensor of shape (B, max_new_tokens) = "
                                 f"{(B, N)}; got shape {tuple(tok.shape)}, dtype {tok.dtype}")
    if not tok.is_signed() or torch.iinfo(tok.dtype).max < V - 1:
        raise SamplerOutputError(f"the sampler's `tokens` must have a signed integer dtype holding every id in [0, {V}) "
                                 f"and PAD = {PAD} (torch.int64, as specimpl returns); got dtype {tok.dtype}")
    bad = (tok < (PAD if pad else 0)) | (tok >= V)
    if bool(bad.any()):
        allowed = f"[0, {V}) or PAD = {PAD}" if pad else f"[0, {V}) (EOS is off, so no PAD)"
        raise SamplerOutputError(f"the sampler's `tokens` must hold ids in {allowed}; got {tok[bad][:5].tolist()}")
    return tok
