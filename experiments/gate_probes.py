"""The probe table of the issue "A gate that cannot be fooled": every failure a demanding new user found
by probing the CLI, the scenario files, the library API and the result files, as one reproducible script.

    python experiments/gate_probes.py                       # every probe -> results/gate/probes.{csv,md}
    python experiments/gate_probes.py --only sampler_raises cli_threads_0
    python experiments/gate_probes.py --list                # the registry: name, problem, expected
    python experiments/gate_probes.py --out /tmp/g --stem probes_before

Each probe runs in a fresh temporary directory (the current directory of every command it starts, so
nothing lands in the repository), with this interpreter (``sys.executable -m harness ...``) and
``PYTHONPATH`` set to the repository holding this file: it measures the checkout it lives in.  Library
probes run in a ``python -c`` subprocess, so a crash or a hang cannot take the script down.  Every
command has a timeout.

A probe states the problem (the issue's words), the *correct* outcome, and a check that returns the
observed outcome (exit status and the first line or two of stderr, or the exception raised) and whether
it is correct.  The script is a measuring instrument, not a gate: it exits 0 whatever the probes show
(2 for bad arguments of its own, 1 only if the script itself breaks).
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "results" / "gate"
SCENARIO_SRC = REPO / "harness" / "configs" / "verify"  # the scenario files (moved from harness/experiments by the wings layout)
MAX_TEXT = 260  # characters of observed text kept per probe

# Quiet, small runs: every verify probe passes these unless it needs otherwise.
QUIET = ("--no-real-model", "--no-figures", "--no-progress")


# --------------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Probe:
    name: str
    problem: str  # the issue's words (and how the probe adapts them)
    expected: str  # the correct outcome
    fn: Callable[["Ctx"], tuple[str, bool]]
    timeout: float  # seconds for the whole probe (each command gets what is left)
    slow: bool = False  # longer than ~10 s on a quiet 2-core machine


REGISTRY: list[Probe] = []


def probe(name: str, problem: str, expected: str, timeout: float = 60.0, slow: bool = False):
    def deco(fn):
        if any(p.name == name for p in REGISTRY):
            raise ValueError(f"probe {name!r} registered twice")
        REGISTRY.append(Probe(name, " ".join(problem.split()), " ".join(expected.split()), fn, timeout, slow))
        return fn
    return deco


# ------------------------------------------------------------------------------------ running things
@dataclass
class Proc:
    rc: Optional[int]  # None when killed on timeout
    out: str
    err: str
    wall: float
    timed_out: bool = False


class ProbeTimeout(Exception):
    pass


def _env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, "1")
    env.pop("PYTHONSTARTUP", None)
    if extra:
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
    return env


def _kill_group(p: subprocess.Popen) -> None:
    """End the process group of a command this script started (by its own id)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Ctx:
    """A probe's temporary directory, its deadline, and the commands it runs there."""

    def __init__(self, probe_: Probe, tmp: Path):
        self.probe = probe_
        self.tmp = tmp
        self.deadline = time.monotonic() + probe_.timeout

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0.5:
            raise ProbeTimeout(f"probe ran past its {self.probe.timeout:g} s")
        return left

    def path(self, *parts) -> Path:
        return self.tmp.joinpath(*parts)

    def write(self, rel: str, text: str) -> Path:
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
        return p

    def run(self, argv: list, timeout: Optional[float] = None, env: Optional[dict] = None) -> Proc:
        t = min(timeout or 1e9, self.remaining())
        tic = time.perf_counter()
        p = subprocess.Popen([str(a) for a in argv], cwd=self.tmp, env=_env(env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=t)
            return Proc(p.returncode, out, err, time.perf_counter() - tic)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            out, err = p.communicate()
            return Proc(None, out or "", err or "", time.perf_counter() - tic, timed_out=True)

    def harness(self, *args, timeout: Optional[float] = None, env: Optional[dict] = None) -> Proc:
        return self.run([sys.executable, "-m", "harness", *args], timeout, env)

    def spawn(self, *args, env: Optional[dict] = None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "harness", *[str(a) for a in args]], cwd=self.tmp,
                                env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def interrupt_when(self, p: subprocess.Popen, ready: Callable[[], bool], timeout: float) -> Proc:
        """Send SIGINT to ``p`` as soon as ``ready()``; Proc.rc None only on timeout.  Proc.out is
        'interrupted' or 'finished' (whether the condition was met before the command ended)."""
        tic = time.perf_counter()
        end = time.monotonic() + min(timeout, self.remaining())
        state = "finished"
        while p.poll() is None:
            if ready():
                p.send_signal(signal.SIGINT)
                state = "interrupted"
                break
            if time.monotonic() > end:
                _kill_group(p)
                state = "timeout"
                break
            time.sleep(0.01)
        try:
            _, err = p.communicate(timeout=max(1.0, min(30.0, end - time.monotonic() + 5)))
        except subprocess.TimeoutExpired:
            _kill_group(p)
            _, err = p.communicate()
            state = "timeout"
        return Proc(p.returncode if state != "timeout" else None, state, err, time.perf_counter() - tic,
                    timed_out=state == "timeout")

    def python(self, *code: str, timeout: Optional[float] = None, env: Optional[dict] = None) -> dict:
        """Run a library snippet in a subprocess.  The snippet's parts (each dedented on its own) become the
        body of ``def _probe():``, which may return a short string; the answer is {'raised': exception type
        name or None, 'mro', 'msg', 'value', 'proc'}."""
        body = textwrap.indent("\n".join(textwrap.dedent(c).strip("\n") for c in code), "    ")
        src = (f"import json, sys\n"
               f"def _probe():\n{body}\n"
               f"try:\n"
               f"    _v = _probe()\n"
               f"    _r = {{'raised': None, 'mro': [], 'msg': '', 'value': None if _v is None else str(_v)}}\n"
               f"except Exception as _e:\n"
               f"    _r = {{'raised': type(_e).__name__, 'mro': [c.__name__ for c in type(_e).__mro__],\n"
               f"          'msg': str(_e), 'value': None}}\n"
               f"print('@@PROBE@@' + json.dumps(_r))\n")
        proc = self.run([sys.executable, "-c", src], timeout, env)
        m = re.search(r"^@@PROBE@@(.*)$", proc.out, re.M)
        if m is None:
            return {"raised": "crash", "mro": [], "msg": describe(proc), "value": None, "proc": proc}
        r = json.loads(m.group(1))
        r["proc"] = proc
        return r


# ------------------------------------------------------------------------------------ describing
def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def has_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" in text


def stderr_head(err: str, n: int = 2) -> str:
    lines = _lines(err)
    if not lines:
        return "(no stderr)"
    if has_traceback(err):
        return f"traceback; {lines[-1]}"
    return " / ".join(lines[:n])


def describe(proc: Proc, n: int = 2) -> str:
    if proc.timed_out:
        return f"timed out after {proc.wall:.0f} s" + (f"; {stderr_head(proc.err, n)}" if proc.err.strip() else "")
    return f"exit {proc.rc}: {stderr_head(proc.err, n)}"


def raised(r: dict) -> str:
    if r["raised"] is None:
        return f"returned: {r['value']}"
    return f"raises {r['raised']}: {_lines(r['msg'])[0] if _lines(r['msg']) else ''}"


def is_value_error(r: dict) -> bool:
    return "ValueError" in r.get("mro", [])


def trim(s: str, n: int = MAX_TEXT) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------------------- shared fixtures
def scenario_dir(ctx: Ctx, files: dict[str, str], name: str = "sd") -> Path:
    """A scenario folder holding a copy of the shipped default.toml plus ``files`` (name -> TOML text)."""
    d = ctx.path(name)
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCENARIO_SRC / "default.toml", d / "default.toml")
    for fname, text in files.items():
        (d / fname).write_text(textwrap.dedent(text).lstrip("\n"))
    return d


GOOD_SAMPLER = """
    # a correct sampler: a thin wrapper around the reference one.  With PROBE_MARK set it also leaves a mark
    # file <PROBE_MARK>_N<max_new_tokens> (which scenario has started) and waits PROBE_SLEEP s per call
    # on the 10-token scenario (alpha_one), so that an interrupt can land there.
    import os, time
    from specimpl import SamplingConfig, speculative_generate

    def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
           generator=None):
        mark = os.environ.get("PROBE_MARK")
        if mark:
            open(f"{mark}_N{max_new_tokens}", "a").close()
            if max_new_tokens == 10:
                time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
"""

LOSSY_SAMPLER = """
    # a lossy sampler: the acceptance uniforms are 0, so every draft is accepted (harness.controls.chain.AcceptEverything)
    import torch
    from specimpl import SamplingConfig, SpeculativeSampler

    class AcceptAll(SpeculativeSampler):
        def uniforms(self, B, generator, dtype, device):
            u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
            return u_draft, torch.zeros_like(u_acc), u_fin

    def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
           generator=None):
        return AcceptAll(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
"""


def tests_csv(out: Path):
    import pandas as pd
    return pd.read_csv(out / "tests.csv")


def not_lossy(r, out: Path) -> bool:
    """A run that found nothing wrong: exit 0 (certified), or exit 4 (inconclusive) with every run of runs.csv
    inconclusive or certified (issue 10: too few draws to certify; nothing rejected) -- never a lossy verdict."""
    if r.rc == 0:
        return True
    import pandas as pd
    try:
        runs = pd.read_csv(out / "runs.csv")
    except (OSError, ValueError):
        return False
    return r.rc == 4 and bool(runs.verdict.str.match(r"(inconclusive|certified|lossless)$").all()) and \
        bool((runs.verdict == "inconclusive").any())


def complete_files(root: Path, exclude=()) -> list[Path]:
    """Files under ``root``, leaving out half-written ones (atomic writes' ``_tmp<name>.*``, dot files)."""
    if not root.exists():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(("_tmp", "."))
                  and p.name not in exclude)


def file_with_traceback(root: Path) -> Optional[Path]:
    """A file under ``root`` (any text file up to 4 MB) holding a Python traceback."""
    if not root.exists():
        return None
    for p in sorted(root.rglob("*")):
        try:
            if p.is_file() and p.stat().st_size < 4 << 20 and \
                    "Traceback (most recent call last)" in p.read_text(errors="replace"):
                return p
        except OSError:
            pass
    return None


# ============================================================================== 1-2: resumption
@probe("resume_swaps_sampler",
       "A run interrupted after its first scenario resumes from the saved draws even when the sampler file "
       "was replaced by a lossy one: `verify --sampler my.py:fn --scenario base --scenario alpha_one` is "
       "interrupted (SIGINT) once base is drawn and saved (out/_tmp_state/) and alpha_one has started (the "
       "correct sampler waits 0.1 s per call on alpha_one so that the interrupt lands there), my.py becomes an accept-every-draft sampler, and "
       "`--scenario base` is rerun into the same --out.",
       "exit 1 (lossy: the changed sampler is redrawn and caught), or exit 2 refusing the stale state; "
       "never exit 0 from the old draws",
       timeout=120, slow=True)
def _resume_swaps_sampler(ctx: Ctx):
    ctx.write("my.py", GOOD_SAMPLER)
    out = ctx.path("out")
    mark = ctx.path("mark")
    alpha_one = Path(f"{mark}_N10")  # alpha_one has max_new_tokens = 10, base 8: base is drawn when it starts

    def saved():
        return complete_files(out)

    p = ctx.spawn("verify", "--sampler", "my.py:fn", "--scenario", "base", "--scenario", "alpha_one",
                  "--draws", 20000, *QUIET, "--out", "out", env={"PROBE_MARK": mark, "PROBE_SLEEP": "0.1"})
    t_ready = []

    def ready():  # alpha_one has started and something is saved (or 1 s has passed since it started)
        if not alpha_one.exists():
            return False
        t_ready.append(time.monotonic())
        return bool(saved()) or time.monotonic() - t_ready[0] > 1.0

    first = ctx.interrupt_when(p, ready, timeout=60)
    if first.out != "interrupted":
        return f"could not interrupt during alpha_one ({first.out}, {describe(first)})", False
    n_saved = len([f for f in saved() if "tmp" in str(f.relative_to(out)) or f.suffix in (".pkl", ".npz")])
    ctx.write("my.py", LOSSY_SAMPLER)
    second = ctx.harness("verify", "--sampler", "my.py:fn", "--scenario", "base", "--draws", 20000, *QUIET,
                         "--out", "out", timeout=60)
    ok = second.rc == 1 or (second.rc == 2 and "sampler" in second.err.lower())
    return f"interrupted in alpha_one, {n_saved} state files kept; rerun with the lossy sampler: {describe(second)}", ok


@probe("calibrate_reuses_seed_across_configs",
       "calibrate keys a stored seed by draws and scenario names only, so a seed computed for k = 7 is "
       "reused after the scenario is edited to k = 16.  Adapted: a finished calibrate run deletes its stored "
       "seeds, so the probe interrupts `calibrate --scenario-dir sd --scenario base --seeds 3 --draws 20000` "
       "(k = 7) once the first seed is under cal/_tmp_seeds/, edits base.toml to k = 16 and reruns; the "
       "tests per seed in pvalues.parquet are compared with a fresh k = 16 run.",
       "every seed of the rerun has the fresh k = 16 test count (the k = 7 seed is redrawn, not reused)",
       timeout=180, slow=True)
def _calibrate_reuses_seed(ctx: Ctx):
    import pandas as pd
    base = (SCENARIO_SRC / "base.toml").read_text()
    sd = scenario_dir(ctx, {"base.toml": base + "\nk = 7\n"})
    cal = ctx.path("cal")
    finals = {"per_test.csv", "family_wise.csv", "pvalues.parquet", "summary.md"}

    def stored():  # any intermediate file of the run (the seed store: cal/_tmp_seeds/*.parquet today)
        return complete_files(cal, exclude=finals)
    first = None
    for draws in (20000, 100000):  # a larger run if the first one finished before the interrupt landed
        shutil.rmtree(ctx.path("cal"), ignore_errors=True)
        p = ctx.spawn("calibrate", "--scenario-dir", sd, "--scenario", "base", "--seeds", 3, "--draws", draws,
                      "--out", "cal", "--no-progress")
        first = ctx.interrupt_when(p, lambda: bool(stored()), timeout=60)
        if first.out == "interrupted":
            break
    else:
        return f"could not interrupt after the first seed ({first.out}, {describe(first)})", False
    n_stored = len(stored())
    (sd / "base.toml").write_text(base + "\nk = 16\n")
    # calibrate runs the block and tree reference runs too (issue 12): at k = 16 the 3-seed rerun takes about
    # a minute on 2 cores, so it gets 120 s
    second = ctx.harness("calibrate", "--scenario-dir", sd, "--scenario", "base", "--seeds", 3, "--draws", draws,
                         "--out", "cal", "--no-progress", timeout=120)
    fresh = ctx.harness("calibrate", "--scenario-dir", sd, "--scenario", "base", "--seeds", 1, "--draws", 2000,
                        "--out", "cal_fresh", "--no-progress", timeout=60)
    try:
        per_seed = pd.read_parquet(ctx.path("cal", "pvalues.parquet")).groupby("seed").size().tolist()
        want = int(pd.read_parquet(ctx.path("cal_fresh", "pvalues.parquet")).groupby("seed").size().iloc[0])
    except (OSError, ValueError, KeyError, IndexError) as e:
        return f"rerun {describe(second)}; fresh {describe(fresh)}; no p-value table ({type(e).__name__})", False
    ok = second.rc == 0 and all(n == want for n in per_seed)
    return (f"interrupted with {n_stored} stored file(s); rerun exit {second.rc}; tests per seed {per_seed}, "
            f"fresh k = 16 run: {want}"), ok


# ============================================================================== 3-6: statistics
@probe("few_draws_false_alarm",
       "The reference sampler fails its own battery at small draw counts: `verify --scenario base --draws 500 "
       "--no-controls --no-real-model` with seeds 1, 2, 3.",
       "exit 0 for every seed (or exit 4 with every run inconclusive: too few draws to certify, nothing lossy)",
       timeout=150, slow=True)  # three verify commands of ~20 s each (start-up, inconclusive-rate simulation); 60 s ran out
def _few_draws(ctx: Ctx):
    rcs, notes, oks = [], [], []
    for seed in (1, 2, 3):
        r = ctx.harness("verify", "--scenario", "base", "--draws", 500, "--no-controls", *QUIET, "--seed", seed,
                        "--out", f"out{seed}", timeout=45)
        rcs.append("timeout" if r.timed_out else r.rc)
        oks.append(not r.timed_out and not_lossy(r, ctx.path(f"out{seed}")))
        if not oks[-1]:
            notes.append(f"seed {seed}: {stderr_head(r.err, 2)}")
    return f"exit {rcs}" + (f"; {notes[0]}" if notes else ""), all(oks)


def _unreachable(ctx: Ctx, name: str, k: int, n: int, timeout: float):
    sd = scenario_dir(ctx, {f"{name}.toml": f"k = {k}\nmax_new_tokens = {n}\n"})
    r = ctx.harness("verify", "--scenario-dir", sd, "--scenario", name, "--draws", 20000, "--no-controls", *QUIET,
                    "--out", "out", timeout=timeout)
    try:
        t = tests_csv(ctx.path("out"))
        t = t[t.scenario == name]
        beyond = int(((t.position >= n) & (t.family == "acceptance")).sum())
        counts = f"{len(t)} tests on {name}, {beyond} acceptance tests at draft positions >= N = {n}"
    except (OSError, ValueError, AttributeError) as e:
        beyond, counts = None, f"no tests.csv ({type(e).__name__})"
    return r, beyond, counts


@probe("k32_short_output",
       "k larger than the output: a scenario with k = 32, max_new_tokens = 8 (custom --scenario-dir), 20,000 "
       "draws, reference sampler, fails.",
       "exit 0 (or exit 4 with every run inconclusive: too few draws to certify, nothing lossy)", timeout=60)
def _k32(ctx: Ctx):
    r, beyond, counts = _unreachable(ctx, "k32", 32, 8, 50)
    return f"{describe(r, 1)}; {counts}", not_lossy(r, ctx.path("out"))


@probe("k1000_unreachable_tests",
       "k = 1000 with max_new_tokens = 8: fails, and the battery tests draft positions that can never be "
       "reached (spending the budget on them).",
       "exit 0 (or 4 with every run inconclusive, nothing lossy) and no tests on unreachable positions "
       "(acceptance tests at draft positions >= N)",
       timeout=90, slow=True)
def _k1000(ctx: Ctx):
    r, beyond, counts = _unreachable(ctx, "k1000", 1000, 8, 80)
    return f"{describe(r, 1)}; {counts}", not_lossy(r, ctx.path("out")) and beyond == 0


@probe("calibrate_500_inconsistent_exit0",
       "`calibrate --draws 500 --seeds 2 --scenario base` reports 'consistent: NO' yet exits 0.",
       "a non-zero exit whenever the summary says consistent: NO (or a consistent result and exit 0)",
       timeout=60)
def _calibrate_500(ctx: Ctx):
    r = ctx.harness("calibrate", "--draws", 500, "--seeds", 2, "--scenario", "base", "--out", "cal",
                    "--no-progress", timeout=50)
    summ = ctx.path("cal", "summary.md")
    text = summ.read_text() if summ.exists() else ""
    no = bool(re.search(r"\|\s*NO\s*\|", text))
    status = "summary says consistent: NO" if no else ("summary consistent" if text else "no summary.md")
    ok = (r.rc not in (0, None)) if no else (r.rc == 0 and bool(text))
    return f"{describe(r, 1)}; {status}", ok


# ============================================================================== 7-11: broken samplers
def _sampler_run(ctx: Ctx, body: str, draws: int = 2000):
    ctx.write("bad.py", body)
    return ctx.harness("verify", "--sampler", "bad.py:fn", "--scenario", "base", "--draws", draws, *QUIET,
                       "--out", "out", timeout=60)


SIG = ("def fn(target, draft, prompts, *, k, max_new_tokens, config=None, eos_token_id=None, "
       "generator=None):\n")


@probe("sampler_raises",
       "A sampler that raises (RuntimeError inside fn) is reported as a failed verification (exit 1) instead "
       "of a sampler failure.",
       "exit 3, the exception summarised on stderr without a traceback, a log file under --out holding the "
       "traceback", timeout=60)
def _sampler_raises(ctx: Ctx):
    r = _sampler_run(ctx, SIG + "    raise RuntimeError('boom from the sampler')\n")
    log = file_with_traceback(ctx.path("out"))
    mention = "boom from the sampler" in r.err
    ok = r.rc == 3 and mention and not has_traceback(r.err) and log is not None
    return (f"{describe(r, 1)}; traceback on stderr: {has_traceback(r.err)}; log with traceback: "
            f"{log.relative_to(ctx.tmp) if log else 'none'}"), ok


@probe("sampler_wrong_signature",
       "A sampler with the wrong signature, fn(a, b).",
       "exit 3 (sampler failure; exit 2 also accepted if refused up front naming the signature), no traceback",
       timeout=60)
def _sampler_signature(ctx: Ctx):
    r = _sampler_run(ctx, "def fn(a, b):\n    return None\n")
    return describe(r), r.rc in (2, 3) and not has_traceback(r.err)


@probe("sampler_wrong_shapes",
       "A sampler returning tokens of the wrong shape ((B, N + 1)) is reported as a failed verification.",
       "exit 3, the shape problem named, no traceback", timeout=60)
def _sampler_shapes(ctx: Ctx):
    r = _sampler_run(ctx, """
        import torch
        from specimpl import SamplingConfig, speculative_generate
        from specimpl.speculative import GenerationResult

        def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
               generator=None):
            res = speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                       eos_token_id=eos_token_id, generator=generator)
            tok = torch.cat([res.tokens, res.tokens[:, :1]], dim=1)
            return GenerationResult(tokens=tok, lengths=res.lengths, stats=res.stats, timings=res.timings)
    """)
    return describe(r), r.rc == 3 and not has_traceback(r.err)


@probe("sampler_sys_exit_0",
       "A sampler that calls sys.exit(0) ends the run with exit 0 and no output.",
       "exit 3, reported as a sampler failure (a clear message, or a report written)", timeout=60)
def _sampler_sys_exit(ctx: Ctx):
    r = _sampler_run(ctx, "import sys\n" + SIG + "    sys.exit(0)\n")
    wrote = sorted(p.name for p in ctx.path("out").glob("*") if p.is_file()) if ctx.path("out").exists() else []
    return f"{describe(r)}; files in out: {wrote[:4] or 'none'}", r.rc == 3 and bool(r.err.strip() or wrote)


@probe("sampler_keyboard_interrupt",
       "A sampler raising KeyboardInterrupt (e.g. a blocking call interrupted) dies with a traceback.",
       "exit 3 (sampler failure, reported) or 130 (judged an interrupt), without a traceback", timeout=60)
def _sampler_kbi(ctx: Ctx):
    r = _sampler_run(ctx, SIG + "    raise KeyboardInterrupt\n")
    return describe(r), r.rc in (3, 130) and not has_traceback(r.err)


# ============================================================================== 12-16: scenario files
def _bad_scenario(ctx: Ctx, text: str, key: str, value: str):
    sd = scenario_dir(ctx, {"bad.toml": text})
    r = ctx.harness("verify", "--scenario-dir", sd, "--scenario", "bad", "--draws", 2000, "--no-controls", *QUIET,
                    "--out", "out", timeout=60)
    err = r.err
    names = "bad.toml" in err and key in err and value in err
    one = len(_lines(err)) == 1
    ok = r.rc == 2 and names and one and not has_traceback(err)
    detail = f"names file/key/value: {names}; stderr lines: {len(_lines(err))}"
    return f"{describe(r, 1)}; {detail}", ok


_SCEN_EXPECT = "exit 2, one line naming bad.toml, the key and its value"


@probe("scenario_draft_kind_bogus", 'Scenario file with draft.kind = "bogus".', _SCEN_EXPECT)
def _scen_kind(ctx: Ctx):
    return _bad_scenario(ctx, '[draft]\nkind = "bogus"\n', "kind", "bogus")


@probe("scenario_eos_out_of_vocab", "Scenario file with eos_token_id = 99 on a vocabulary of 8.", _SCEN_EXPECT)
def _scen_eos(ctx: Ctx):
    return _bad_scenario(ctx, "eos_token_id = 99\n", "eos_token_id", "99")


@probe("scenario_target_order_0", "Scenario file with target.order = 0.", _SCEN_EXPECT)
def _scen_order(ctx: Ctx):
    return _bad_scenario(ctx, "[target]\norder = 0\n", "order", "0")


@probe("scenario_empty_prompt", "Scenario file with prompt = [].", _SCEN_EXPECT)
def _scen_prompt(ctx: Ctx):
    return _bad_scenario(ctx, "prompt = []\n", "prompt", "[]")


@probe("scenario_typo_key",
       "Misspelt keys are silently ignored: `temprature = 0.5` under [sampling], and `vocab_sise = 8` under "
       "[target] (two runs).",
       "exit 2 for each, one line naming bad.toml and the unknown key", timeout=60)
def _scen_typo(ctx: Ctx):
    res = []
    for text, key in (("[sampling]\ntemprature = 0.5\n", "temprature"), ("[target]\nvocab_sise = 8\n", "vocab_sise")):
        sd = scenario_dir(ctx, {"bad.toml": text}, name=f"sd_{key}")
        r = ctx.harness("verify", "--scenario-dir", sd, "--scenario", "bad", "--draws", 2000, "--no-controls",
                        *QUIET, "--out", f"out_{key}", timeout=30)
        ok = r.rc == 2 and "bad.toml" in r.err and key in r.err and len(_lines(r.err)) == 1
        res.append((key, r, ok))
    obs = "; ".join(f"{key}: {describe(r, 1)}" for key, r, _ in res)
    return obs, all(ok for _, _, ok in res)


# ============================================================================== 17-25: CLI
@probe("cli_seed_negative", "`verify --seed -1`.", "exit 2, one line naming --seed", timeout=40)
def _seed_neg(ctx: Ctx):
    r = ctx.harness("verify", "--scenario", "base", "--draws", 2000, "--no-controls", *QUIET, "--seed", -1,
                    "--out", "out", timeout=35)
    return describe(r), r.rc == 2 and "--seed" in r.err and not has_traceback(r.err)


@probe("cli_out_uncreatable", "`verify --out` a folder that cannot be created (under a regular file).",
       "exit 2, one line naming --out and the path", timeout=40)
def _out_bad(ctx: Ctx):
    ctx.write("afile", "not a folder\n")
    r = ctx.harness("verify", "--scenario", "base", "--draws", 2000, "--no-controls", *QUIET,
                    "--out", "afile/out", timeout=35)
    return describe(r), r.rc == 2 and "afile" in r.err and not has_traceback(r.err)


@probe("cli_scenario_repeated", "`verify --scenario base --scenario base`.",
       "exit 2 naming the duplicate, or run once with a note that the duplicate was dropped", timeout=40)
def _scen_dup(ctx: Ctx):
    r = ctx.harness("verify", "--scenario", "base", "--scenario", "base", "--draws", 2000, "--no-controls", *QUIET,
                    "--out", "out", timeout=35)
    runs_note = ""
    try:
        import pandas as pd
        runs = pd.read_csv(ctx.path("out", "runs.csv"))
        runs_note = f"; runs.csv rows for base: {int((runs.scenario == 'base').sum())}"
    except (OSError, ValueError, AttributeError):
        pass
    noted = bool(re.search(r"duplicate|more than once|twice|repeated|dropp", r.err, re.I))
    ok = (r.rc == 2 and "base" in r.err and not has_traceback(r.err)) or (r.rc == 0 and noted)
    return describe(r, 1) + runs_note, ok


@probe("cli_threads_0", "`verify --threads 0` is silently taken as 1.", "exit 2, one line naming --threads",
       timeout=40)
def _threads0(ctx: Ctx):
    r = ctx.harness("verify", "--scenario", "base", "--draws", 2000, "--no-controls", *QUIET, "--threads", 0,
                    "--out", "out", timeout=35)
    return describe(r, 1), r.rc == 2 and "--threads" in r.err


@probe("sweep_empty_suites",
       "`sweep --suites ''` runs the full default sweep.  Probed with --list (print the plan and exit), so no "
       "sweep runs.",
       "exit 2 naming --suites", timeout=40)
def _sweep_empty(ctx: Ctx):
    r = ctx.harness("sweep", "--suites", "", "--list", "--out", "sw", timeout=35)
    planned = [ln.split()[1] for ln in r.out.splitlines() if ln.startswith(("todo", "stored")) and len(ln.split()) > 1]
    suites = sorted(set(planned))
    note = f"; plan: {len(planned)} cells of suites {suites}" if planned else ""
    return describe(r, 1) + note, r.rc == 2 and "--suites" in r.err


@probe("sweep_config_unknown_key",
       "A sweep config with an unknown key (`[grid]` `alpah = ...`) ends in a traceback.  Probed with --list.",
       "exit 2, one line naming the file and the key", timeout=40)
def _sweep_unknown(ctx: Ctx):
    ctx.write("bad_sweep.toml", 'name = "probe"\n[grid]\nalpah = [0.0, 0.9, 10]\n')
    r = ctx.harness("sweep", "--config", "bad_sweep.toml", "--list", "--out", "sw", timeout=35)
    ok = r.rc == 2 and "alpah" in r.err and "bad_sweep.toml" in r.err and len(_lines(r.err)) == 1
    return describe(r, 1), ok


@probe("report_missing_results", "`report --results <a folder that does not exist>` ends in a traceback.",
       "exit 2, one line naming --results and the path", timeout=40)
def _report_missing(ctx: Ctx):
    r = ctx.harness("report", "--results", "no_such_results", timeout=35)
    ok = r.rc == 2 and "no_such_results" in r.err and not has_traceback(r.err)
    return describe(r, 1), ok


@probe("stale_figures",
       "A second run into the same --out leaves the first run's files beside its own: verify with figures "
       "(correct sampler), then with --no-figures and a lossy sampler.",
       "after the second run the out folder holds only files written by it (no figures/ from the first)",
       timeout=90, slow=True)
def _stale_figures(ctx: Ctx):
    ctx.write("good.py", GOOD_SAMPLER)
    ctx.write("lossy.py", LOSSY_SAMPLER)
    r1 = ctx.harness("verify", "--sampler", "good.py:fn", "--scenario", "base", "--draws", 20000, "--no-real-model",
                     "--no-progress", "--out", "out", timeout=60)
    time.sleep(1.1)  # mtime resolution
    t2 = time.time()
    r2 = ctx.harness("verify", "--sampler", "lossy.py:fn", "--scenario", "base", "--draws", 20000, *QUIET,
                     "--out", "out", timeout=60)
    out = ctx.path("out")
    stale = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.stat().st_mtime < t2 - 0.5)
    obs = (f"first {describe(r1, 0).split(':')[0]}, second {describe(r2, 0).split(':')[0]}; files older than the "
           f"second run: {stale[:4] or 'none'}" + (f" (+{len(stale) - 4})" if len(stale) > 4 else ""))
    return obs, r2.rc == 1 and not stale


@probe("report_grid_only",
       "`report` on a valid grid-only sweep (`sweep --suites grid`) fails.",
       "exit 0 (figures of the grid drawn)", timeout=90, slow=True)
def _report_grid(ctx: Ctx):
    s = ctx.harness("sweep", "--suites", "grid", "--out", "sw", "--no-progress", timeout=60)
    if s.rc != 0:
        return f"the grid sweep itself failed: {describe(s)}", False
    r = ctx.harness("report", "--results", "sw", "--formats", "png", timeout=60)
    return describe(r, 1), r.rc == 0


# ============================================================================== 26-35: library API
_LIB_SETUP = """
    import torch
    from specimpl import (LanguageModel, SamplingConfig, autoregressive_generate, noisy_draft, random_ngram,
                          speculative_generate)
    t = random_ngram(8, 2, seed=0)
    d = noisy_draft(t, 0.5)
    g = lambda s=0: torch.Generator().manual_seed(s)
"""

_WRAP_MODEL = """
    class Poisoned(LanguageModel):
        # target logits poisoned by `poison(logits, tokens)`: the generic (model-call) path
        def __init__(self, inner, poison):
            self.inner, self.poison = inner, poison
            self.vocab_size, self.dtype, self.name = inner.vocab_size, torch.float32, 'poisoned'
        def prefill(self, prompts):
            return self.inner.prefill(prompts)
        def forward(self, state, tokens, n_new=None):
            return self.poison(self.inner.forward(state, tokens, n_new).clone(), tokens)
        def rollback(self, state, lengths):
            return self.inner.rollback(state, lengths)
        def select(self, state, index):
            return self.inner.select(state, index)

    def both(tp):
        out = []
        for name, call in (('spec', lambda: speculative_generate(tp, d, [[0]] * 200, k=4, max_new_tokens=8,
                                                                 generator=g())),
                           ('ar', lambda: autoregressive_generate(tp, [[0]] * 200, max_new_tokens=8,
                                                                  generator=g()))):
            try:
                tok = call().tokens
                share = float((tok == tp.vocab_size - 1).float().mean())
                out.append(f'{name}: returned ({share:.0%} of tokens = last id {tp.vocab_size - 1})')
            except ValueError as e:
                out.append(f'{name}: ValueError: {str(e)[:90]}')
            except Exception as e:
                out.append(f'{name}: {type(e).__name__}: {str(e)[:90]}')
        return '; '.join(out)
"""


def _lib_both(ctx: Ctx, poison: str):
    r = ctx.python(_LIB_SETUP, _WRAP_MODEL, poison, "return both(Poisoned(t, poison))", timeout=60)
    if r["raised"] is not None:
        return raised(r), False
    parts = r["value"].split("; ")
    return r["value"], all(": ValueError" in p for p in parts)


@probe("lib_nan_logits",
       "NaN in one target logit row (a LanguageModel whose forward returns NaN logits after token 3): "
       "speculative_generate and autoregressive_generate emit the last vocabulary id instead of failing.",
       "both raise ValueError (non-finite logits)", timeout=60)
def _lib_nan(ctx: Ctx):
    return _lib_both(ctx, """
        def poison(logits, tokens):
            logits[tokens == 3] = float('nan')
            return logits
    """)


@probe("lib_inf_logits",
       "±inf logits: +inf in one entry after token 3, and a row all -inf after token 5 (two runs); softmax "
       "turns either into NaN.",
       "both samplers raise ValueError for each", timeout=60)
def _lib_inf(ctx: Ctx):
    obs, oks = [], []
    for label, body in (("+inf", "logits[..., 2][tokens == 3] = float('inf')"),
                        ("row -inf", "logits[tokens == 5] = float('-inf')")):
        o, ok = _lib_both(ctx, f"def poison(logits, tokens):\n    {body}\n    return logits\n")
        obs.append(f"{label}: {o}")
        oks.append(ok)
    return " | ".join(obs), all(oks)


@probe("lib_tiny_temperature",
       "SamplingConfig(temperature=1e-39) on float32 tables: logits / T overflows to inf, the output is garbage "
       "(every token the last id).",
       "a ValueError (at SamplingConfig or at the call), or the greedy output (the T -> 0 limit)", timeout=60)
def _lib_temp(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        cfg = SamplingConfig(temperature=1e-39)
        tok = speculative_generate(t, d, [[0]] * 50, k=4, max_new_tokens=8, config=cfg, generator=g()).tokens
        greedy = speculative_generate(t, d, [[0]] * 50, k=4, max_new_tokens=8, config=SamplingConfig(greedy=True),
                                      generator=g()).tokens
        return f'tokens[0] = {tok[0].tolist()}, equal to greedy: {bool((tok == greedy).all())}'
    """, timeout=60)
    ok = is_value_error(r) or (r["raised"] is None and "equal to greedy: True" in (r["value"] or ""))
    return raised(r), ok


@probe("lib_float_prompt", "prompts=[[0.7]] is silently truncated to token 0.",
       "raises ValueError naming `prompts`", timeout=60)
def _lib_float_prompt(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        res = speculative_generate(t, d, [[0.7]], k=4, max_new_tokens=4, generator=g())
        return f'tokens {res.tokens.tolist()}'
    """)
    return raised(r), is_value_error(r) and "prompts" in r["msg"]


@probe("lib_uint8_prompts",
       "A uint8 token tensor as prompts on a vocabulary of 300: id 255 is refused with a message quoting it "
       "as outside [0, 300) (the comparison overflows uint8).",
       "accepted, or a clear message about the dtype (never a valid id quoted as invalid)", timeout=60)
def _lib_uint8(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        t3, d3 = random_ngram(300, 1, seed=0), random_ngram(300, 1, seed=1)
        res = speculative_generate(t3, d3, torch.tensor([[255]], dtype=torch.uint8), k=2, max_new_tokens=4,
                                   generator=g())
        return f'tokens {res.tokens.tolist()}'
    """)
    if r["raised"] is None:
        return raised(r), True
    quotes_valid = "255" in r["msg"] and "300" in r["msg"] and "uint8" not in r["msg"] and "dtype" not in r["msg"]
    return raised(r), not quotes_valid and r["raised"] in ("ValueError", "TypeError")


@probe("lib_k_numpy_int", "k=np.int64(4) is refused as not an integer.", "accepted", timeout=60)
def _lib_k_np(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        import numpy as np
        res = speculative_generate(t, d, [[0]], k=np.int64(4), max_new_tokens=4, generator=g())
        return f'tokens {res.tokens.tolist()}'
    """)
    return raised(r), r["raised"] is None


@probe("lib_generator_int", "generator=7 fails deep inside torch.rand with a message about rand().",
       "raises an error (ValueError or TypeError) naming `generator`", timeout=60)
def _lib_gen(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        res = speculative_generate(t, d, [[0]], k=4, max_new_tokens=4, generator=7)
        return f'tokens {res.tokens.tolist()}'
    """)
    return raised(r), r["raised"] in ("ValueError", "TypeError") and "generator" in r["msg"] and "rand()" not in r["msg"]


@probe("lib_verify_block_checked_short_vocab",
       "verify_block_checked with target probabilities p of V - 1 columns (q and x on V = 8): the error blames "
       "`q`, whose shape is right, with a V taken from p.",
       "a ValueError naming `p` (or the vocabulary / column mismatch of p and q)", timeout=60)
def _lib_vbc(ctx: Ctx):
    r = ctx.python("""
        import torch
        from specimpl import verify_block_checked
        torch.manual_seed(0)
        B, k, V = 2, 4, 8
        p = torch.softmax(torch.randn(B, k + 1, V - 1), -1)
        q = torch.softmax(torch.randn(B, k, V), -1)
        x = torch.randint(0, V, (B, k))
        n, y = verify_block_checked(p, q, x, torch.rand(B, k), torch.rand(B))
        return f'n {n.tolist()}, y {y.tolist()}'
    """)
    msg = r["msg"]
    ok = is_value_error(r) and ("`p`" in msg or re.search(r"vocab|column", msg, re.I) is not None)
    return raised(r), ok


@probe("lib_load_pair_empty_dir",
       "specimpl.hf.load_pair on an empty directory says 'Unrecognized model ... model_type'.",
       "a clear error naming the path and what is missing (config.json), not 'Unrecognized model'", timeout=60)
def _lib_empty_dir(ctx: Ctx):
    ctx.path("empty_model").mkdir()
    r = ctx.python("""
        from specimpl.hf import load_pair
        load_pair('empty_model', 'empty_model')
    """, env={"HF_HUB_OFFLINE": "1"})
    msg = r["msg"]
    ok = r["raised"] not in (None, "crash") and "empty_model" in msg and "Unrecognized model" not in msg
    return raised(r), ok


@probe("lib_load_pair_path_typo",
       "A local path typo is tried as a hub id, with retries.  Two forms, HF_HUB_OFFLINE unset: "
       "'./no_such_dir/model' and 'models/targt' where ./models exists (a typo inside a local folder).",
       "each fails fast (< 3 s) with an error naming the path", timeout=120, slow=True)
def _lib_typo(ctx: Ctx):
    ctx.path("models").mkdir()
    obs, oks = [], []
    for path in ("./no_such_dir/model", "models/targt"):
        r = ctx.python(f"""
            import time
            from transformers import AutoConfig, AutoTokenizer  # imports are not what is timed
            from specimpl.hf import load_pair
            tic = time.perf_counter()
            try:
                load_pair({path!r}, {path!r})
            except Exception as e:
                raise type(e)(f'[{{time.perf_counter() - tic:.1f}} s] {{e}}') from None
            return f'loaded?! in {{time.perf_counter() - tic:.1f}} s'
        """, timeout=55, env={"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None})
        m = re.match(r"\[([\d.]+) s\]", r["msg"] or "")
        secs = float(m.group(1)) if m else None
        first = _lines(r["msg"])[0] if _lines(r["msg"]) else ""
        obs.append(f"{path}: " + (f"{r['raised']} after {secs:.1f} s: {first[m.end():].strip()[:80]}" if m
                                  else raised(r)))
        oks.append(secs is not None and secs < 3 and path.strip("./").split("/")[-1] in r["msg"])
    return " | ".join(obs), all(oks)


# ============================================================================== 36: provenance
@probe("provenance_dirty",
       "Committed result files claim a dirty tree or a commit that is not in this branch's history: every "
       "results/**/meta.json, the sidecar <name>.csv.meta.json of every CSV and the provenance of every parquet file.",
       "every committed result names a commit that is an ancestor of HEAD, with dirty = false", timeout=60)
def _provenance(ctx: Ctx):
    ls = subprocess.run(["git", "-C", str(REPO), "ls-files", "results"], capture_output=True, text=True, timeout=20)
    files = [f for f in ls.stdout.split() if f.endswith(("meta.json", ".csv", ".parquet"))
             and not f.startswith("results/gate/")]
    dirty, foreign, missing, checked = [], [], [], 0
    ancestors: dict[str, bool] = {}
    for rel in files:
        path = REPO / rel
        meta = None
        try:
            if rel.endswith(".json"):
                meta = json.loads(path.read_text())
            elif rel.endswith(".csv"):  # its sidecar <name>.csv.meta.json (or a '# provenance:' first line, older)
                side = path.with_name(path.name + ".meta.json")
                with open(path) as f:
                    first = f.readline()
                if side.is_file():
                    meta = json.loads(side.read_text())
                elif first.startswith("# provenance:"):
                    meta = json.loads(first.split(":", 1)[1])
            else:
                import pyarrow.parquet as pq
                md = pq.read_schema(path).metadata or {}
                if b"provenance" in md:
                    meta = json.loads(md[b"provenance"])
        except (OSError, ValueError) as e:
            missing.append(f"{rel} ({type(e).__name__})")
            continue
        if meta is None or "commit" not in meta:
            missing.append(rel)
            continue
        checked += 1
        c = meta.get("commit")
        if meta.get("dirty") is not False:
            dirty.append(rel)
        if not c:
            foreign.append(f"{rel} (no commit)")
            continue
        if c not in ancestors:
            a = subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", c, "HEAD"],
                               capture_output=True, timeout=20)
            ancestors[c] = a.returncode == 0
        if not ancestors[c]:
            foreign.append(f"{rel} ({c[:10]})")

    def names(xs):
        return ", ".join(x.replace("results/", "") for x in xs[:5]) + (f" (+{len(xs) - 5})" if len(xs) > 5 else "")

    obs = (f"{checked} files with provenance; dirty: {len(dirty)}" + (f" [{names(dirty)}]" if dirty else "") +
           f"; commit not an ancestor of HEAD: {len(foreign)}" + (f" [{names(foreign)}]" if foreign else "") +
           (f"; no provenance: {len(missing)} [{names(missing)}]" if missing else ""))
    return obs, checked > 0 and not dirty and not foreign and not missing


# ====================================================== issue 26: "Nothing lost, nothing falsely certified"
TINY = REPO / "specimpl" / "assets" / "tiny_pair"
SMALL_SAMPLE = ("--engine", "ours", "--no-progress", "--n-prompts", 4, "--n-per-prompt", 2, "--max-new-tokens", 8)


def _verdict(ctx: Ctx, out: str) -> str:
    """The verdict a verify-samples report folder records (meta.json), or '?'."""
    try:
        return json.loads(ctx.path(out, "meta.json").read_text()).get("verdict", "?")
    except (OSError, ValueError):
        return "?"


def _sample(ctx: Ctx, out: str, *args, timeout: float = 90) -> Proc:
    return ctx.harness("sample", "--out", out, *args, timeout=timeout)


def _sample_ids(path: Path) -> list[str]:
    ids = []
    for line in path.read_text().splitlines():
        try:
            ids.append(json.loads(line)["request_id"])
        except (ValueError, KeyError, TypeError):
            ids.append("<unreadable>")
    return ids


@probe("i26_partial_sweep_keeps_tables",
       "Finding 1 (data loss): `sweep --suites grid` deletes the committed results/sweep/default/{measured.csv, "
       "profiles.csv, timings.csv, fidelity.json} (the manifest removes the previous report's files a partial "
       "run did not rewrite); a following `report` then deletes committed figures.  Probed on a copy of the "
       "committed folder (grid cells left out; the algorithm cells, the data of its figures, copied): `sweep --suites grid --out sw`, then `report --results sw --out sw/figures`.",
       "after both commands every committed table and figure is still there (the tables of suites not run "
       "byte-identical)", timeout=170, slow=True)
def _partial_sweep(ctx: Ctx):
    src = REPO / "results" / "sweep" / "default"
    sw = ctx.path("sw")
    shutil.copytree(src, sw, ignore=shutil.ignore_patterns("cells"))
    # the algorithm suite's cells are the data of its committed figures (as on a fresh clone); the grid cells
    # are left out (the grid run recomputes them)
    shutil.copytree(src / "cells" / "algorithms", sw / "cells" / "algorithms")
    tables = ["measured.csv", "profiles.csv", "timings.csv", "fidelity.json"]
    before = {t: (sw / t).read_bytes() for t in tables if (sw / t).exists()}
    figs = sorted(p.relative_to(sw).as_posix() for p in (sw / "figures").rglob("*") if p.is_file())
    s = ctx.harness("sweep", "--suites", "grid", "--out", "sw", "--no-progress", timeout=80)
    lost = [t for t in before if not (sw / t).exists()]
    changed = [t for t in before if (sw / t).exists() and (sw / t).read_bytes() != before[t]]
    r = ctx.harness("report", "--results", "sw", "--out", "sw/figures", timeout=80)
    gone = [f for f in figs if not (sw / f).exists()]
    obs = (f"sweep {describe(s, 0).split(':')[0]}: tables lost {lost or 'none'}, changed {changed or 'none'}; "
           f"report {describe(r, 0).split(':')[0]}: {len(gone)} of {len(figs)} committed figure files gone"
           + (f" ({', '.join(gone[:3])})" if gone else ""))
    return obs, s.rc == 0 and r.rc == 0 and not lost and not changed and not gone and len(before) == len(tables)


def _dup_renamed(src: Path, dst: Path) -> None:
    lines = [ln for ln in src.read_text().splitlines() if ln.strip()]
    extra = []
    for ln in lines:
        o = json.loads(ln)
        o["request_id"] += "-b"
        extra.append(json.dumps(o, separators=(",", ":")))
    dst.write_text("\n".join(lines + extra) + "\n")


@probe("i26_duplicated_renamed_ids_certify",
       "Finding 2 (false certificate): every line of a sample file duplicated with request_id += \"-b\": "
       "`verify-samples --samples dup.jsonl --target T --epsilon 0.5` certifies (exit 0) where the original is "
       "inconclusive; the duplicate check compares only adjacent completions.  Probed with 16 prompts x 4 "
       "completions of 32 tokens of the tiny pair.",
       "the duplicated file is not certified: exit 1 with verdict lossy (the duplicates found), or exit 2",
       timeout=170, slow=True)
def _dup_renamed_probe(ctx: Ctx):
    s = _sample(ctx, "a.jsonl", "--engine", "ours", "--no-progress", "--n-prompts", 16, "--n-per-prompt", 4,
                timeout=100)
    if s.rc != 0:
        return f"sample failed: {describe(s)}", False
    _dup_renamed(ctx.path("a.jsonl"), ctx.path("dup.jsonl"))
    r = ctx.harness("verify-samples", "--samples", "dup.jsonl", "--target", TINY / "target", "--epsilon", 0.5,
                    "--out", "v", "--no-progress", timeout=60)
    v = _verdict(ctx, "v")
    return f"{describe(r, 1)}; verdict {v}", (r.rc == 1 and v == "lossy") or r.rc == 2


@probe("i26_baseline_is_samples",
       "Finding 2 (false certificate): the same file given as --samples and --baseline certifies at epsilon "
       "0.9.  Probed with a file of 8 prompts x 4 completions of 8 tokens, given twice, and a renamed copy.",
       "exit 2 for both, one line naming both files (a baseline identical to the sample set is refused)",
       timeout=120, slow=True)
def _baseline_same(ctx: Ctx):
    s = _sample(ctx, "a.jsonl", "--engine", "ours", "--no-progress", "--n-prompts", 8, "--n-per-prompt", 4,
                "--max-new-tokens", 8, timeout=60)
    if s.rc != 0:
        return f"sample failed: {describe(s)}", False
    shutil.copy(ctx.path("a.jsonl"), ctx.path("copy.jsonl"))
    obs, oks = [], []
    for base in ("a.jsonl", "copy.jsonl"):
        r = ctx.harness("verify-samples", "--samples", "a.jsonl", "--baseline", base, "--epsilon", 0.9,
                        "--out", "v", "--no-progress", timeout=30)
        obs.append(f"{base}: {describe(r, 1)}")
        oks.append(r.rc == 2 and "a.jsonl" in r.err and base in r.err and not has_traceback(r.err))
    return " | ".join(obs), all(oks)


@probe("i26_baseline_one_per_prompt",
       "Finding 3 (false 'lossy'): a baseline with one completion per prompt makes our own reference sampler "
       "'lossy' (\"1 of 16 pairs identical vs 0 of 0 in the baseline\", p = 0).  Probed: 16 prompts x 8 "
       "completions of 1 token by our speculative sampler (short completions collide legitimately) against "
       "16 x 1 of our autoregressive sampler.",
       "not lossy: exit 0 (certified) or exit 4 with verdict inconclusive; a test without data in one arm "
       "does not reject", timeout=170, slow=True)
def _baseline_one(ctx: Ctx):
    a = _sample(ctx, "a.jsonl", "--engine", "ours", "--no-progress", "--n-prompts", 16, "--n-per-prompt", 8,
                "--max-new-tokens", 1, timeout=60)
    b = _sample(ctx, "b.jsonl", "--engine", "ours", "--no-progress", "--n-prompts", 16, "--n-per-prompt", 1,
                "--max-new-tokens", 1, "--method", "autoregressive", "--seed", 1, timeout=60)
    if a.rc != 0 or b.rc != 0:
        return f"sample failed: {describe(a)} / {describe(b)}", False
    r = ctx.harness("verify-samples", "--samples", "a.jsonl", "--baseline", "b.jsonl", "--out", "v",
                    "--no-progress", timeout=40)
    v = _verdict(ctx, "v")
    dup = ""
    try:
        import pandas as pd
        t = pd.read_csv(ctx.path("v", "tests.csv"))
        row = t[t["test"].astype(str).str.contains("duplicates")]
        dup = f"; duplicates row: p = {float(row['pvalue'].iloc[0]):.3g} ({str(row['method'].iloc[0])[:70]})" \
            if len(row) else ""
    except (OSError, ValueError, KeyError, IndexError):
        pass
    return f"{describe(r, 1)}; verdict {v}{dup}", r.rc in (0, 4) and v in ("certified", "inconclusive")


HELPER_GOOD = """
    from specimpl import SamplingConfig, speculative_generate
    def gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator):
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
"""

HELPER_LOSSY = """
    import torch
    from specimpl import SpeculativeSampler
    class AcceptAll(SpeculativeSampler):
        def uniforms(self, B, generator, dtype, device):
            u_draft, u_acc, u_fin = super().uniforms(B, generator, dtype, device)
            return u_draft, torch.zeros_like(u_acc), u_fin
    def gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator):
        return AcceptAll(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
"""

SAMPLER_VIA_HELPER = """
    # the sampler is a thin file; the work is in helper.py (PROBE_MARK / PROBE_SLEEP as in GOOD_SAMPLER)
    import os, time
    from specimpl import SamplingConfig
    from helper import gen

    def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
           generator=None):
        mark = os.environ.get("PROBE_MARK")
        if mark:
            open(f"{mark}_N{max_new_tokens}", "a").close()
            if max_new_tokens == 10:
                time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))
        return gen(target, draft, prompts, k, max_new_tokens, config, eos_token_id, generator)
"""


@probe("i26_sampler_helper_stale",
       "Finding 4 (stale draws reused): a sampler file s.py doing `from helper import gen`: interrupt a run "
       "(`verify --sampler s.py:fn --scenario base --scenario alpha_one`, SIGINT once base is saved), make "
       "helper.py lossy (accept every draft), rerun `--scenario base` into the same --out -> \"reused 3 saved "
       "draw shards from an earlier run of the same code\".  Only the sampler file is fingerprinted.",
       "exit 1 (lossy) with the sampler's saved shard found stale and redrawn (the target-only baseline, "
       "same code, may be reused), or exit 2 refusing to resume naming helper.py; never a draw of the old "
       "helper reused", timeout=170, slow=True)
def _helper_stale(ctx: Ctx):
    ctx.write("helper.py", HELPER_GOOD)
    ctx.write("s.py", SAMPLER_VIA_HELPER)
    out, mark = ctx.path("out"), ctx.path("mark")
    alpha_one = Path(f"{mark}_N10")
    p = ctx.spawn("verify", "--sampler", "s.py:fn", "--scenario", "base", "--scenario", "alpha_one",
                  "--draws", 20000, *QUIET, "--out", "out", env={"PROBE_MARK": mark, "PROBE_SLEEP": "0.1",
                                                                 "PYTHONPATH": f"{ctx.tmp}{os.pathsep}{REPO}"})
    t0 = []

    def ready():  # alpha_one has started and base's two shards (sampler, target-only baseline) are saved
        if not alpha_one.exists():
            return False
        t0.append(time.monotonic())
        return len(list(out.glob("_tmp_state/*.npz"))) >= 2 or time.monotonic() - t0[0] > 3.0
    first = ctx.interrupt_when(p, ready, timeout=80)
    n_saved = len(list(out.glob("_tmp_state/*.npz")))
    if first.out != "interrupted":
        return f"could not interrupt during alpha_one ({first.out}, {describe(first)})", False
    ctx.write("helper.py", HELPER_LOSSY)
    second = ctx.harness("verify", "--sampler", "s.py:fn", "--scenario", "base", "--draws", 20000, *QUIET,
                         "--out", "out", timeout=80, env={"PYTHONPATH": f"{ctx.tmp}{os.pathsep}{REPO}"})
    try:
        resume = json.loads(ctx.path("out", "meta.json").read_text()).get("resume", {})
    except (OSError, ValueError):
        resume = {}
    stale = resume.get("stale_shards_redrawn", 0)
    ok = (second.rc == 1 and stale >= 1) or (second.rc == 2 and "helper" in second.err)
    return (f"{n_saved} shards saved at the interrupt; rerun with a lossy helper.py: {describe(second, 0)}; "
            f"reused {resume.get('reused_shards')}, stale redrawn {stale}"), ok


@probe("i26_concurrent_sample_writers",
       "Finding 5 (a corrupt sample file): two `sample ... --out out.jsonl` at once both exit 0 and leave "
       "request ids twice; afterwards `sample` and `verify-samples` refuse the file (exit 2).  Probed with "
       "8 prompts x 2 completions of 8 tokens, the two commands started together.",
       "one writer at a time: the second exits 2 naming the lock (or waits), and the file holds every "
       "request id once", timeout=170, slow=True)
def _concurrent(ctx: Ctx):
    args = ("sample", "--out", "out.jsonl", "--engine", "ours", "--no-progress", "--n-prompts", 8,
            "--n-per-prompt", 2, "--max-new-tokens", 8, "--batch-size", 2)
    ps = [ctx.spawn(*args) for _ in range(2)]
    res = []
    for p in ps:
        try:
            _, err = p.communicate(timeout=ctx.remaining())
        except subprocess.TimeoutExpired:
            _kill_group(p)
            _, err = p.communicate()
        res.append((p.returncode, err))
    ids = _sample_ids(ctx.path("out.jsonl")) if ctx.path("out.jsonl").exists() else []
    twice = len(ids) - len(set(ids))
    rcs = sorted(rc for rc, _ in res)
    locked = [err for rc, err in res if rc == 2]
    obs = (f"exits {rcs}; {len(ids)} lines, {twice} request ids twice" +
           (f"; refused: {stderr_head(locked[0], 1)}" if locked else ""))
    ok = twice == 0 and len(set(ids)) == 16 and (rcs == [0, 0] or (rcs == [0, 2] and "lock" in locked[0].lower()))
    return obs, ok


@probe("i26_sample_repair_path",
       "Finding 5: a sample file holding a request id twice (what two writers left) is refused by `sample` "
       "and `verify-samples` (exit 2) with no repair path.  Probed: a file of 4 x 2 completions with one "
       "line appended again; `sample` resumes it; the documented repair `python -m harness samples-dedupe "
       "--samples out.jsonl` is run; `sample` resumes again.",
       "the refusal names the repair command; samples-dedupe exits 0 keeping each request id once; the "
       "resumed `sample` then exits 0", timeout=170, slow=True)
def _repair(ctx: Ctx):
    s = _sample(ctx, "out.jsonl", *SMALL_SAMPLE, timeout=60)
    if s.rc != 0:
        return f"sample failed: {describe(s)}", False
    lines = ctx.path("out.jsonl").read_text().splitlines()
    ctx.path("out.jsonl").write_text("\n".join(lines + [lines[3]]) + "\n")
    r1 = _sample(ctx, "out.jsonl", *SMALL_SAMPLE, timeout=40)
    d = ctx.harness("samples-dedupe", "--samples", "out.jsonl", timeout=40)
    ids = _sample_ids(ctx.path("out.jsonl"))
    r2 = _sample(ctx, "out.jsonl", *SMALL_SAMPLE, timeout=40)
    obs = (f"resume of the corrupt file: {describe(r1, 1)}; samples-dedupe: {describe(d, 1)}; then {len(ids)} "
           f"lines, {len(ids) - len(set(ids))} ids twice; resume: exit {r2.rc}")
    ok = r1.rc == 2 and "samples-dedupe" in r1.err and d.rc == 0 and len(ids) == len(set(ids)) == 8 and r2.rc == 0
    return obs, ok


@probe("i26_resume_other_settings",
       "Finding 5: resuming `sample` with another --prompt-seed, --method or --control silently mixes prompt "
       "sets or engines in one file.  Probed: `sample --n-prompts 2` then, into the same --out, `--n-prompts "
       "4` with --prompt-seed 1, with --method autoregressive, with --control shared_stream (three files).",
       "each resume exits 2 with one line naming the differing option (--prompt-seed, --method, --control) "
       "and the file, writing nothing", timeout=170, slow=True)
def _resume_other(ctx: Ctx):
    base = ("--engine", "ours", "--no-progress", "--n-per-prompt", 2, "--max-new-tokens", 4)
    obs, oks = [], []
    for name, extra in (("--prompt-seed", ("--prompt-seed", 1)), ("--method", ("--method", "autoregressive")),
                        ("--control", ("--control", "shared_stream"))):
        f = f"{name.strip('-')}.jsonl"
        s = _sample(ctx, f, *base, "--n-prompts", 2, timeout=50)
        if s.rc != 0:
            return f"sample failed: {describe(s)}", False
        n0 = len(_sample_ids(ctx.path(f)))
        r = _sample(ctx, f, *base, "--n-prompts", 4, *extra, timeout=50)
        n1 = len(_sample_ids(ctx.path(f)))
        obs.append(f"{name}: {describe(r, 1)} ({n1 - n0} lines added)")
        oks.append(r.rc == 2 and name in r.err and f in r.err and n1 == n0)
    return " | ".join(obs), all(oks)


@probe("i26_tree_nonfinite_logits",
       "Finding 6 (silent garbage): a NaN or +inf logit in tree_generate gives a row of the last token id "
       "with no error (speculative_generate and block_generate raise NonFiniteLawError).",
       "tree_generate raises NonFiniteLawError (a ValueError) for NaN and for +inf", timeout=60)
def _tree_nonfinite(ctx: Ctx):
    obs, oks = [], []
    for label, body in (("nan", "logits[tokens == 3] = float('nan')"),
                        ("+inf", "logits[..., 2][tokens == 3] = float('inf')")):
        r = ctx.python(_LIB_SETUP, _WRAP_MODEL, f"def poison(logits, tokens):\n    {body}\n    return logits\n", """
            from specimpl.tree import tree_generate
            tok = tree_generate(Poisoned(t, poison), d, [[0]] * 200, k=2, max_new_tokens=8, generator=g()).tokens
            share = float((tok == t.vocab_size - 1).float().mean())
            return f'returned ({share:.0%} of tokens = last id {t.vocab_size - 1})'
        """, timeout=50)
        obs.append(f"{label}: {raised(r)}")
        oks.append(r["raised"] == "NonFiniteLawError")
    return " | ".join(obs), all(oks)


@probe("i26_logits_wrong_width",
       "Finding 6: a model whose logits have V +- 1 columns gives a raw torch index error "
       "(speculative/block/tree) or returns tokens (autoregressive_generate).",
       "every sampler raises ValueError naming the vocabulary size, for V - 1 and V + 1 columns", timeout=90, slow=True)
def _wrong_width(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        import torch.nn.functional as F
        from specimpl import block_generate
        from specimpl.tree import tree_generate
        class Wide(LanguageModel):
            def __init__(self, inner, extra):
                self.inner, self.extra = inner, extra
                self.vocab_size, self.dtype, self.name = inner.vocab_size, torch.float32, 'wide'
            def prefill(self, prompts):
                return self.inner.prefill(prompts)
            def forward(self, state, tokens, n_new=None):
                x = self.inner.forward(state, tokens, n_new)
                return F.pad(x, (0, 1), value=-1.0) if self.extra > 0 else x[..., :-1]
            def rollback(self, state, lengths):
                return self.inner.rollback(state, lengths)
            def select(self, state, index):
                return self.inner.select(state, index)
        out = []
        for extra in (-1, 1):
            tp = Wide(t, extra)
            for name, call in (('spec', lambda: speculative_generate(tp, d, [[0]] * 20, k=2, max_new_tokens=4, generator=g())),
                               ('block', lambda: block_generate(tp, d, [[0]] * 20, k=2, max_new_tokens=4, generator=g())),
                               ('tree', lambda: tree_generate(tp, d, [[0]] * 20, k=2, max_new_tokens=4, generator=g())),
                               ('ar', lambda: autoregressive_generate(tp, [[0]] * 20, max_new_tokens=4, generator=g()))):
                try:
                    call()
                    out.append(f'V{extra:+d} {name}: returned')
                except ValueError as e:
                    out.append(f'V{extra:+d} {name}: ValueError' + (' (names 8)' if '8' in str(e) else ''))
                except Exception as e:
                    out.append(f'V{extra:+d} {name}: {type(e).__name__}')
        return '; '.join(out)
    """, timeout=80)
    v = r["value"] or ""
    parts = v.split("; ")
    return raised(r), r["raised"] is None and len(parts) == 8 and all("ValueError (names 8)" in x for x in parts)


@probe("i26_tune_bandwidth_zero",
       "Finding 6: `tune` with bandwidth_gbps = 0 (a hardware file) exits 0 recommending 'off' with S = nan.",
       "exit 2, one line naming bandwidth_gbps and the file", timeout=120, slow=True)
def _tune_bw(ctx: Ctx):
    text = (REPO / "harness" / "configs" / "hardware" / "a100.toml").read_text()
    ctx.write("hw0.toml", re.sub(r"(?m)^bandwidth_gbps\s*=.*$", "bandwidth_gbps = 0", text))
    r = ctx.harness("tune", "--target", TINY / "target", "--draft", TINY / "draft", "--hardware", "hw0.toml",
                    "--batch", "1", "--context", "32", "--k", "1,2", "--algorithms", "chain", timeout=110)
    return describe(r, 1), r.rc == 2 and "bandwidth_gbps" in r.err and "hw0.toml" in r.err


DROP_SERVER = """
    # an OpenAI-compatible completions endpoint that drops every connection halfway through its response
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0)); s.listen(64)
    open(sys.argv[1], "w").write(str(s.getsockname()[1]))
    while True:
        c, _ = s.accept()
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: 4000\\r\\n\\r\\n"
                      b'{"id": "x", "choices": [{"text": "')
        finally:
            c.close()
"""


@probe("i26_openai_dropped_connection",
       "Finding 7 (network faults): a server that drops the connection mid-response makes `sample --engine "
       "openai` fail at once (exit 3, IncompleteRead), with no retry, request id or resume hint.  Probed "
       "with a local server that drops every response halfway; --retries 2 --backoff 0.05.",
       "the request is retried (stderr says so), then exit 3 naming the request id and how to resume",
       timeout=120, slow=True)
def _dropped(ctx: Ctx):
    ctx.write("drop.py", DROP_SERVER)
    port_file = ctx.path("port")
    srv = subprocess.Popen([sys.executable, str(ctx.path("drop.py")), str(port_file)], cwd=ctx.tmp,
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text()}/v1"
        r = ctx.harness("sample", "--engine", "openai", "--url", url, "--model", "m", "--out", "o.jsonl",
                        "--n-prompts", 2, "--n-per-prompt", 1, "--max-new-tokens", 4, "--retries", 2, "--backoff",
                        0.05, "--timeout", 5, "--no-progress", timeout=90)
    finally:
        _kill_group(srv)
        srv.wait()
    err = r.err.lower()
    ok = (r.rc == 3 and "retr" in err and re.search(r"p\d+-s\d+", r.err) is not None
          and ("resume" in err or "again" in err) and not has_traceback(r.err))
    return describe(r, 2), ok


STUB_SERVER = """
    # the shipped OpenAI-compatible stub (harness/samples/openai_stub.py) serving the tiny pair, until killed
    import os, sys, time
    from harness.verify.realmodel import tiny_pair
    from harness.samples.openai_stub import OpenAIStub
    target, draft = tiny_pair()
    with OpenAIStub(target, draft) as srv:
        open(sys.argv[1] + ".tmp", "w").write(srv.url)
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        while True:
            time.sleep(1)
"""


def _drop_once_proxy(upstream: str):
    """A proxy on 127.0.0.1 in this process that forwards POSTs to ``upstream`` (a base URL ending in /v1) and
    cuts the first response halfway (its Content-Length promised, half the body sent, the connection closed)."""
    import threading
    import urllib.error
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    state = {"dropped": 0, "forwarded": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            req = urllib.request.Request(upstream[:-len("/v1")] + self.path, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    code, data = r.status, r.read()
            except urllib.error.HTTPError as e:
                code, data = e.code, e.read()
            with lock:
                drop = code == 200 and state["dropped"] == 0
                state["dropped" if drop else "forwarded"] += 1
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2] if drop else data)
            self.close_connection = True

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, state


def _records_without_url(path: Path) -> list:
    recs = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    for r in recs:
        r.get("engine", {}).pop("url", None)  # the proxy's port, not the stub's
    return sorted(recs, key=lambda r: r.get("request_id", ""))


@probe("i26_openai_drop_once_recovers",
       "Finding 7: a server that drops the connection mid-response must be retried.  Probed: the shipped stub "
       "(harness/samples/openai_stub.py) behind a local proxy that cuts its first response halfway; `sample "
       "--engine openai --request-seeds` through the proxy and, undisturbed, straight to the stub.",
       "exit 0 with the retry announced on stderr, and the records of the undisturbed run (the engine's url "
       "aside)", timeout=170, slow=True)
def _drop_once(ctx: Ctx):
    ctx.write("stub.py", STUB_SERVER)
    url_file = ctx.path("url")
    srv = subprocess.Popen([sys.executable, str(ctx.path("stub.py")), str(url_file)], cwd=ctx.tmp, env=_env(),
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    httpd = None
    try:
        end = time.monotonic() + 60
        while not url_file.exists() and time.monotonic() < end and srv.poll() is None:
            time.sleep(0.1)
        if not url_file.exists():
            return f"the stub did not start (exit {srv.poll()})", False
        stub = url_file.read_text()
        httpd, state = _drop_once_proxy(stub)
        args = ("sample", "--engine", "openai", "--model", "tiny", "--n-prompts", 3, "--n-per-prompt", 2,
                "--max-new-tokens", 6, "--eos-token-id", 257, "--request-seeds", "--concurrency", 2, "--backoff",
                0.05, "--no-progress")
        calm = ctx.harness(*args, "--url", stub, "--out", "calm.jsonl", timeout=min(50, ctx.remaining() - 1))
        drop = ctx.harness(*args, "--url", f"http://127.0.0.1:{httpd.server_address[1]}/v1", "--out", "drop.jsonl",
                           timeout=ctx.remaining() - 1)
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        _kill_group(srv)
        srv.wait()
    same = (calm.rc == 0 and drop.rc == 0 and
            _records_without_url(ctx.path("calm.jsonl")) == _records_without_url(ctx.path("drop.jsonl")))
    obs = (f"undisturbed: exit {calm.rc}; one response cut ({state['dropped']} cut, {state['forwarded']} "
           f"forwarded): {describe(drop, 1)}; records {'equal' if same else 'differ (or missing)'}")
    return obs, same and "retr" in drop.err.lower() and not has_traceback(drop.err)


@probe("i26_openai_bad_options",
       "Finding 7: `sample --engine openai` with --timeout 0, --timeout -1, --backoff -1, or a URL without a "
       "scheme exits 3 instead of 2 (the last after 23 s of retries).",
       "exit 2 for each, up front: one line of stderr naming the option (no retry announced), and no connection "
       "made to the --url (a local socket that counts them)", timeout=180, slow=True)
def _openai_bad(ctx: Ctx):
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    accepted = []

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            accepted.append(1)
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    base = ("sample", "--engine", "openai", "--model", "m", "--out", "o.jsonl", "--n-prompts", 1,
            "--n-per-prompt", 1, "--max-new-tokens", 2, "--no-progress")
    url = ("--url", f"http://127.0.0.1:{srv.getsockname()[1]}/v1")
    obs, oks = [], []
    try:
        for name, extra in (("--timeout", (*url, "--timeout", 0)), ("--timeout", (*url, "--timeout", -1)),
                            ("--backoff", (*url, "--backoff", -1)), ("--url", ("--url", "127.0.0.1:9/v1"))):
            n0 = len(accepted)
            r = ctx.harness(*base, *extra, timeout=35)
            sent = len(accepted) - n0
            obs.append(f"{' '.join(str(x) for x in extra[-2:])}: exit {r.rc} in {r.wall:.0f} s, {sent} connections"
                       + (f" ({stderr_head(r.err, 1)[:70]})" if r.rc != 2 else ""))
            oks.append(r.rc == 2 and name in r.err and len(r.err.strip().splitlines()) == 1 and sent == 0)
    finally:
        srv.close()
    return "; ".join(obs), all(oks)


@probe("i26_workers_1000",
       "Finding 7: `--workers 1000` on 2 cores spawns dozens of workers and produces nothing in 200 s.  "
       "Probed: `verify --scenario base --draws 2000 --no-controls` with --workers 2, then --workers 1000.",
       "exit 2 naming --workers (more workers than the machine can run), or the same exit as with 2 workers "
       "in at most twice their time + 20 s", timeout=175, slow=True)
def _workers(ctx: Ctx):
    args = ("verify", "--scenario", "base", "--draws", 2000, "--no-controls", *QUIET)
    ref = ctx.harness(*args, "--workers", 2, "--out", "out2", timeout=70)
    if ref.rc is None:
        return f"the 2-worker run itself timed out ({describe(ref)})", False
    limit = 2 * ref.wall + 20
    r = ctx.harness(*args, "--workers", 1000, "--out", "out", timeout=min(limit + 5, ctx.remaining() - 1))
    obs = f"--workers 2: exit {ref.rc} in {ref.wall:.0f} s; --workers 1000: {describe(r, 1)} in {r.wall:.0f} s"
    return obs, (r.rc == 2 and "--workers" in r.err) or (r.rc == ref.rc and r.wall <= limit)


@probe("i26_sampler_uint8_tokens",
       "Finding 8 (still open): a sampler returning uint8 tokens is refused with a message quoting valid ids, "
       "not the dtype.",
       "accepted (exit 0 or 1 from the battery), or exit 3/2 with a message naming the dtype uint8", timeout=60, slow=True)
def _uint8(ctx: Ctx):
    r = _sampler_run(ctx, """
        import torch
        from specimpl import SamplingConfig, speculative_generate
        from specimpl.speculative import GenerationResult

        def fn(target, draft, prompts, *, k, max_new_tokens, config=SamplingConfig(), eos_token_id=None,
               generator=None):
            res = speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                       eos_token_id=eos_token_id, generator=generator)
            return GenerationResult(tokens=res.tokens.to(torch.uint8), lengths=res.lengths, stats=res.stats,
                                    timings=res.timings)
    """)
    return describe(r, 1), r.rc in (0, 1, 4) or (r.rc in (2, 3) and "uint8" in r.err)


@probe("i26_sweep_bad_models_up_front",
       "Finding 8: bad `real.drafts` / `profile.models` in a sweep file fail at the first cell with exit 3 "
       "instead of up front with exit 2.  Probed: `sweep --config bad.toml --out sw` with a real suite of one "
       "unknown draft, and a profile suite of one unknown model.",
       "exit 2 for each before any cell runs, one line naming the file, the key and the value", timeout=120,
       slow=True)
def _sweep_bad_models(ctx: Ctx):
    obs, oks = [], []
    for key, text in (("drafts", 'name = "probe"\nsuites = ["real"]\n[real]\ndrafts = ["no_such_draft"]\n'),
                      ("models", 'name = "probe"\nsuites = ["profile"]\n[profile]\nmodels = ["no_such_model"]\n')):
        ctx.write(f"{key}.toml", text)
        r = ctx.harness("sweep", "--config", f"{key}.toml", "--out", f"sw_{key}", "--no-progress", timeout=55)
        cells = list(ctx.path(f"sw_{key}").rglob("*.json")) if ctx.path(f"sw_{key}").exists() else []
        obs.append(f"{key}: {describe(r, 1)}")
        oks.append(r.rc == 2 and key in r.err and f"{key}.toml" in r.err and "no_such" in r.err and not cells)
    return " | ".join(obs), all(oks)


@probe("i26_load_pair_local_absent",
       "Finding 8: `load_pair(\"tiny/target\", ...)` with tiny/ absent spends 25 s retrying the hub (a "
       "local-looking path must fail fast).  HF_HUB_OFFLINE unset.",
       "fails within 3 s with an error naming the path", timeout=90, slow=True)
def _load_absent(ctx: Ctx):
    r, secs = _timed_load_absent(ctx)
    return raised(r), secs is not None and secs < 3 and "tiny/target" in r["msg"]


def _timed_load_absent(ctx: Ctx, **env) -> tuple[dict, Optional[float]]:
    """`load_pair('tiny/target', ...)` with tiny/ absent and the hub client online (plus ``env``): the answer of
    :meth:`Ctx.python` and the seconds until it failed (None when it did not fail with a timed message)."""
    r = ctx.python("""
        import time
        from transformers import AutoConfig, AutoTokenizer
        from specimpl.hf import load_pair
        tic = time.perf_counter()
        try:
            load_pair('tiny/target', 'tiny/draft')
        except Exception as e:
            raise type(e)(f'[{time.perf_counter() - tic:.1f} s] {e}') from None
        return 'loaded?!'
    """, timeout=70, env={"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, **env})
    m = re.match(r"\[([\d.]+) s\]", r["msg"] or "")
    return r, (float(m.group(1)) if m else None)


@probe("i26_tree_numpy_k_tensor_eos",
       "Finding 8: tree_generate refuses k=np.int64(2), and an EOS given as a 0-d tensor gives a deep TypeError.",
       "both accepted (the same tokens as k=2 / eos_token_id=3)", timeout=60)
def _tree_np(ctx: Ctx):
    r = ctx.python(_LIB_SETUP, """
        import numpy as np
        from specimpl.tree import tree_generate
        ref = tree_generate(t, d, [[0]] * 20, k=2, max_new_tokens=6, eos_token_id=3, generator=g()).tokens
        out = []
        for name, kw in (('k=np.int64(2)', dict(k=np.int64(2), eos_token_id=3)),
                         ('eos=tensor(3)', dict(k=2, eos_token_id=torch.tensor(3)))):
            try:
                tok = tree_generate(t, d, [[0]] * 20, max_new_tokens=6, generator=g(), **kw).tokens
                out.append(f'{name}: ' + ('same tokens' if torch.equal(tok, ref) else 'other tokens'))
            except Exception as e:
                out.append(f'{name}: {type(e).__name__}: {str(e)[:60]}')
        return '; '.join(out)
    """, timeout=50)
    v = r["value"] or ""
    return raised(r), r["raised"] is None and v.count("same tokens") == 2


@probe("byhand_hub_accepts_never_answers",
       "By-hand rerun of issue 26 (row 8c'): `load_pair(\"tiny/target\", ...)` with tiny/ absent and HF_ENDPOINT "
       "at a local socket that accepts and never answers printed nothing for 240 s (the probe was one TCP "
       "connect, which such a host passes).  HF_HUB_OFFLINE unset; the socket is this probe's own, closed after.",
       "fails within 10 s (Python and transformers start-up included) with an error naming the path and the host",
       timeout=90, slow=True)
def _hub_silent(ctx: Ctx):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        r, secs = _timed_load_absent(ctx, HF_ENDPOINT=f"http://127.0.0.1:{sock.getsockname()[1]}")
    finally:
        sock.close()
    return raised(r), secs is not None and secs < 10 and "tiny/target" in r["msg"] and "127.0.0.1" in r["msg"]


@probe("byhand_partial_sweep_provenance",
       "By-hand rerun of issue 26 (row 1c): after `sweep --suites grid` meta.json described only the 1-cell run, "
       "and the next `report` headed summary.md, fidelity.md and algorithms.md with that run's commit, machine and "
       "'cells stored 1 of 1' over the kept tables of the committed 159-cell run.  Probed on a copy of "
       "results/sweep/default (grid cells left out): `sweep --suites grid --out sw`, then `report --results sw --out sw/figures`.",
       "summary.md, fidelity.md and algorithms.md name the commit and date of the committed tables' run, as "
       "before the partial run", timeout=170, slow=True)
def _partial_provenance(ctx: Ctx):
    src = REPO / "results" / "sweep" / "default"
    sw = ctx.path("sw")
    shutil.copytree(src, sw, ignore=shutil.ignore_patterns("cells"))
    shutil.copytree(src / "cells" / "algorithms", sw / "cells" / "algorithms")
    heads = ("summary.md", "fidelity.md", "algorithms.md")
    before = {f: (src / "figures" / f).read_text().splitlines()[:3] for f in heads}
    s = ctx.harness("sweep", "--suites", "grid", "--out", "sw", "--no-progress", timeout=80)
    r = ctx.harness("report", "--results", "sw", "--out", "sw/figures", timeout=80)
    after = {f: (sw / "figures" / f).read_text().splitlines()[:3] if (sw / "figures" / f).exists() else []
             for f in heads}
    same = [f for f in heads if after[f] == before[f]]
    obs = (f"sweep {describe(s, 0).split(':')[0]}, report {describe(r, 0).split(':')[0]}: headers unchanged in "
           f"{len(same)} of {len(heads)} ({', '.join(same) or 'none'})")
    return obs, s.rc == 0 and r.rc == 0 and len(same) == len(heads)


# ====================================== issue 45: "A gate that fails closed" (sizes, names, loopback, smaller rows)
# The rows of issue 45 that the branch `limits` fixes.  Its other rows (os._exit, saved state, orphans,
# determinism, hang, staging, lock, absolute paths) are probed by the tests of their own branches (gate,
# outputs, csv); docs/gate-probes.md lists every row.
MEMORY_LIMIT = 4 * 2 ** 30  # bytes of address space a size probe's command may map (as `ulimit -v`)
TINY_DIR = REPO / "specimpl" / "assets" / "tiny_pair"


def _limited(ctx: Ctx, *args, timeout: float = 60) -> Proc:
    """``python -m harness *args`` under RLIMIT_AS = MEMORY_LIMIT: an unchecked size ends in MemoryError
    (exit 3) instead of the OOM killer."""
    boot = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
            "os.execv(sys.executable, [sys.executable, '-m', 'harness', *sys.argv[1:]])" % (MEMORY_LIMIT, MEMORY_LIMIT))
    return ctx.run([sys.executable, "-c", boot, *args], timeout)


def _refused(r: Proc, *needles: str) -> tuple[str, bool]:
    """exit 2, one line on stderr naming every needle, no traceback."""
    last = _lines(r.err)[-1] if _lines(r.err) else "(no stderr)"
    ok = r.rc == 2 and not has_traceback(r.err) and all(n in last for n in needles)
    head = "timed out" if r.timed_out else f"exit {r.rc}"
    return f"{head}: {last} ({r.wall:.1f} s)", ok


_SIZE_EXPECT = "exit 2 within seconds, one line naming the option (or file: key), the value and the limit"


@probe("i45_verify_draws_huge",
       "`verify --draws 100000000000000` builds its chunk plan in memory, grows to 22 GB and is killed by the OOM "
       "killer.  Probed under a 4 GB address-space limit.", _SIZE_EXPECT, timeout=40)
def _i45_draws(ctx: Ctx):
    return _refused(_limited(ctx, "verify", "--draws", 10 ** 14, "--scenario", "base", "--workers", 1, *QUIET,
                             "--out", "out"), "--draws", "100000000000000")


@probe("i45_sample_n_per_prompt_huge",
       "`sample --n-per-prompt 1000000000` ends in MemoryError (exit 3).  Under a 4 GB limit.", _SIZE_EXPECT,
       timeout=40)
def _i45_npp(ctx: Ctx):
    return _refused(_limited(ctx, "sample", "--engine", "ours", "--n-per-prompt", 10 ** 9, "--out", "s.jsonl",
                             "--no-progress"), "--n-per-prompt", "1000000000")


@probe("i45_tune_batch_huge",
       "`tune --batch 1000000000` ends in MemoryError (exit 3).  On the tiny pair, --context 64, under a 4 GB limit.",
       _SIZE_EXPECT, timeout=60)
def _i45_batch(ctx: Ctx):
    return _refused(_limited(ctx, "tune", "--target", TINY_DIR / "target", "--draft", TINY_DIR / "draft", "--batch",
                             10 ** 9, "--context", 64, "--out", "t", timeout=55), "--batch", "1000000000")


def _i45_scenario(ctx: Ctx, text: str, key: str, value: str):
    scenario_dir(ctx, {"bad.toml": text})
    r = _limited(ctx, "verify", "--scenario-dir", "sd", "--scenario", "bad", "--draws", 20000, "--no-controls",
                 "--workers", 1, *QUIET, "--out", "out")
    return _refused(r, "bad.toml", key, value)


@probe("i45_scenario_joint_tokens_8", "A scenario file with joint_tokens = 8 allocates GBs before any check "
       "(exit 3).  Under a 4 GB limit.", _SIZE_EXPECT, timeout=40)
def _i45_joint(ctx: Ctx):
    return _i45_scenario(ctx, "joint_tokens = 8\n", "joint_tokens", "8")


@probe("i45_scenario_max_new_tokens_1e5", "A scenario file with max_new_tokens = 100000 allocates 49 GB before any "
       "check.  Under a 4 GB limit.", _SIZE_EXPECT, timeout=40)
def _i45_n(ctx: Ctx):
    return _i45_scenario(ctx, "max_new_tokens = 100000\n", "max_new_tokens", "100000")


@probe("i45_scenario_order_10", "A scenario file with target.order = 10 allocates 8 GB before any check.  Under a "
       "4 GB limit.", _SIZE_EXPECT, timeout=40)
def _i45_order(ctx: Ctx):
    return _i45_scenario(ctx, "[target]\norder = 10\n", "target.order", "10")


@probe("i45_scenario_vocab_1e5", "A scenario file with target.vocab_size = 100000 allocates 75 GB before any "
       "check.  Under a 4 GB limit.", _SIZE_EXPECT, timeout=40)
def _i45_vocab(ctx: Ctx):
    return _i45_scenario(ctx, "[target]\nvocab_size = 100000\n", "target.vocab_size", "100000")


@probe("i45_sample_max_new_tokens_1e5", "`sample --max-new-tokens 100000` generates for 3 min 41 s, then exits 3 on "
       "the model's 2,048 positions.", "exit 2 before any generation, naming --max-new-tokens and the positions",
       timeout=40)
def _i45_sample_n(ctx: Ctx):
    return _refused(_limited(ctx, "sample", "--engine", "ours", "--max-new-tokens", 100000, "--out", "s.jsonl",
                             "--no-progress"), "--max-new-tokens", "2,048")


@probe("i45_sweep_name_dots", 'A sweep file with name = ".." writes grid.parquet, meta.json and cells/ into the top '
       'of results/ (and "." likewise).  Probed with --list for both.', "exit 2 for each, naming `name`", timeout=40)
def _i45_name(ctx: Ctx):
    res = []
    for name in ("..", "."):
        ctx.write("sw.toml", f'name = "{name}"\n')
        r = ctx.harness("sweep", "--config", "sw.toml", "--list", timeout=30)
        res.append((name, *_refused(r, "`name`")))
    return "; ".join(f"{n!r}: {obs}" for n, obs, _ in res), all(ok for *_, ok in res)


@probe("i45_sweep_bad_values", "Sweep files with grid.k_max = 0, grid.alpha beyond 1, synthetic.alpha below 0 or "
       "synthetic.max_new_tokens = 0 pass --list and exit 3 at run time.", "exit 2 from --list for each, naming "
       "file: key", timeout=60)
def _i45_sweep_values(ctx: Ctx):
    res = []
    for text, key in (("[grid]\nk_max = 0\n", "grid.k_max"), ("[grid]\nalpha = [0.0, 1.5, 10]\n", "grid.alpha"),
                      ("[synthetic]\nalpha = [-0.1]\n", "synthetic.alpha"),
                      ("[synthetic]\nmax_new_tokens = 0\n", "synthetic.max_new_tokens")):
        ctx.write("sw.toml", text)
        r = ctx.harness("sweep", "--config", "sw.toml", "--list", timeout=30)
        res.append((key, r.rc, *_refused(r, "sw.toml", key)))
    return ("; ".join(f"{k}: exit {rc}" for k, rc, _, _ in res) + f" | first: {res[0][2]}",
            all(ok for *_, ok in res))


@probe("i45_sample_target_without_draft", "`sample --engine ours --target X` without --draft looks up a model "
       "named 'None' on the hub (exit 3); with --method autoregressive, which needs no draft, too.",
       "speculative: exit 2 naming --draft; autoregressive: runs (exit 0) on the target alone", timeout=60)
def _i45_target_only(ctx: Ctx):
    t = TINY_DIR / "target"
    a = ctx.harness("sample", "--engine", "ours", "--target", t, "--out", "a.jsonl", "--no-progress", timeout=25)
    b = ctx.harness("sample", "--engine", "ours", "--method", "autoregressive", "--target", t, "--n-prompts", 2,
                    "--n-per-prompt", 2, "--max-new-tokens", 4, "--out", "b.jsonl", "--no-progress", timeout=30)
    obs_a, ok_a = _refused(a, "--draft")
    return f"speculative: {obs_a}; autoregressive: {describe(b, 1)}", ok_a and b.rc == 0


@probe("i45_sample_draft_without_target", "`sample --draft X` without --target exits 0 having silently used the "
       "shipped tiny pair, even for a path that does not exist.", "exit 2 naming --draft (and --target)", timeout=40)
def _i45_draft_only(ctx: Ctx):
    return _refused(ctx.harness("sample", "--engine", "ours", "--draft", "no/such/draft", "--out", "s.jsonl",
                                "--no-progress", timeout=35), "--draft", "--target")


@probe("i45_out_proc", "`verify --out /proc/x` (a folder that cannot be made) ends in exit 3.",
       "exit 2 naming --out and the path", timeout=40)
def _i45_out(ctx: Ctx):
    return _refused(ctx.harness("verify", "--out", "/proc/x", "--scenario", "base", "--draws", 2000, *QUIET,
                                timeout=35), "--out", "/proc")


def _i45_samples_file(ctx: Ctx, name: str = "s.jsonl", edit=None) -> Path:
    recs = []
    for i in range(6):
        for j in range(2):
            recs.append({"format": "specverify.samples/1", "request_id": f"p{i}-s{j}", "prompt_id": f"p{i}",
                         "prompt_ids": [256, 65 + i], "output_ids": [97 + (i + j + t) % 26 for t in range(4)],
                         "finish_reason": "length", "controls": {"temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                                                 "min_p": 0.0, "seed": None, "max_new_tokens": 4,
                                                                 "greedy": False, "stop": []},
                         "logprobs": None, "engine": {"name": "synthetic"}})
    if edit is not None:
        edit(recs)
    return ctx.write(name, "".join(json.dumps(r) + "\n" for r in recs))


@probe("i45_dedupe_read_only", "`samples-dedupe` on a read-only file ends in exit 3 (a traceback-like failure).",
       "exit 2 naming --samples and saying it is read-only; the file unchanged", timeout=40)
def _i45_dedupe(ctx: Ctx):
    f = _i45_samples_file(ctx)
    f.chmod(0o444)
    before = f.read_text()
    obs, ok = _refused(ctx.harness("samples-dedupe", "--samples", f.name, timeout=35), "--samples", "read-only")
    return obs, ok and f.read_text() == before


@probe("i45_url_notaport", "`sample --engine openai --url http://127.0.0.1:notaport/v1` exits 3 after 6 attempts.",
       "exit 2 naming --url before any request", timeout=40)
def _i45_url(ctx: Ctx):
    return _refused(ctx.harness("sample", "--engine", "openai", "--url", "http://127.0.0.1:notaport/v1", "--model",
                                "m", "--out", "o.jsonl", "--no-progress", timeout=35), "--url", "notaport")


@probe("i45_verify_samples_eos_999", "`verify-samples --eos-token-id 999` on a 259-token model is accepted.",
       "exit 2 naming --eos-token-id and the vocabulary", timeout=40)
def _i45_eos(ctx: Ctx):
    f = _i45_samples_file(ctx)
    return _refused(ctx.harness("verify-samples", "--samples", f.name, "--target", TINY_DIR / "target", "--eos-token-id",
                                999, "--out", "r", "--no-progress", timeout=35), "--eos-token-id", "999", "259")


@probe("i45_prompt_vocab_beyond", "`sample --prompt-vocab` beyond the model's vocabulary (100000 on the tiny pair's "
       "259) exits 3.", "exit 2 naming --prompt-vocab and the vocabulary", timeout=40)
def _i45_prompt_vocab(ctx: Ctx):
    return _refused(ctx.harness("sample", "--engine", "ours", "--prompt-vocab", 100000, "--out", "s.jsonl",
                                "--no-progress", timeout=35), "--prompt-vocab", "259")


@probe("i45_prompt_id_two_prompts", "One prompt_id holding two different prompts is accepted by verify-samples.",
       "exit 2 naming the prompt_id and the two requests (or judged as separate prompts, said so)", timeout=40)
def _i45_pid(ctx: Ctx):
    def edit(recs):
        recs[1]["prompt_ids"] = [256, 99]
    f = _i45_samples_file(ctx, edit=edit)
    return _refused(ctx.harness("verify-samples", "--samples", f.name, "--target", TINY_DIR / "target", "--out", "r",
                                "--no-progress", timeout=35), "prompt_id 'p0'", "p0-s1")


@probe("i45_two_eos_policies", "A file whose completions follow two EOS policies (one stops at EOS, another runs on "
       "past it) is scored as one law.", "exit 2 naming the two completions (or split, said so)", timeout=40)
def _i45_policies(ctx: Ctx):
    def edit(recs):
        recs[0]["output_ids"][-1], recs[0]["finish_reason"] = 257, "eos"
        recs[2]["output_ids"][1] = 257
    f = _i45_samples_file(ctx, edit=edit)
    return _refused(ctx.harness("verify-samples", "--samples", f.name, "--target", TINY_DIR / "target", "--out", "r",
                                "--no-progress", timeout=35), "two EOS policies")


@probe("i45_openai_logprobs_length", "OpenAI token_logprobs of the wrong length are stored as null with no word.",
       "the record is refused with a line naming token_logprobs and the lengths", timeout=40)
def _i45_logprobs(ctx: Ctx):
    r = ctx.python("""
        from harness.samples.format import Controls
        from harness.samples.openai import EndpointSpec, parse_choice
        from harness.samples.producers import Request
        spec = EndpointSpec(url="http://127.0.0.1:1/v1", model="m", controls=Controls(1.0, 0, 1.0, 3))
        ch = {"finish_reason": "length", "logprobs": {"tokens": ["token_id:5", "token_id:6", "token_id:7"],
                                                      "token_logprobs": [-1.0, -2.0]}}
        return parse_choice(spec, Request("p0-s0", "p0", (256, 1)), {"choices": [ch]}, None).logprobs
    """, timeout=35)
    return raised(r), is_value_error(r) and "token_logprobs" in r["msg"]


@probe("i45_ray_loopback", "`--backend ray` without --address starts a local Ray whose GCS, raylet, workers and "
       "agents bind *, 0.0.0.0 or the node's address.  Probed: a local RayBackend runs one task; every listening "
       "socket of the process tree is read from /proc.", "every listening socket on loopback (127.0.0.0/8, ::1)",
       timeout=180, slow=True)
def _i45_ray(ctx: Ctx):
    r = ctx.python(f"""
        import os, sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from listening import listening, non_loopback
        from harness.core.backends import RayBackend
        b = RayBackend(None, workers=1, object_store_memory=80 * 2 ** 20)
        try:
            list(b.map_unordered(abs, [-1]))
            rows = listening(os.getpid())
        finally:
            b.close()
        bad = non_loopback(rows)
        return f"{{len(rows)}} listening sockets in {{len({{x[0] for x in rows}})}} processes; non-loopback: {{bad[:4]}}"
    """, timeout=170)
    return raised(r), r["raised"] is None and r["value"].endswith("non-loopback: []")


# ------------------------------------------------------------------------------------------- driver
def run_probe(p: Probe, keep: bool = False) -> dict:
    """Run one probe in a fresh temporary directory; never raises."""
    tmp = Path(tempfile.mkdtemp(prefix=f"gate_{p.name}_"))
    tic = time.perf_counter()
    err = ""
    try:
        ctx = Ctx(p, tmp)
        observed, ok = p.fn(ctx)
    except ProbeTimeout as e:
        observed, ok, err = f"probe timed out ({e})", False, "timeout"
    except Exception as e:  # noqa: BLE001 - a probe that breaks is recorded, not fatal
        observed, ok, err = f"probe error: {type(e).__name__}: {e}", False, "probe error"
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"probe": p.name, "problem": p.problem, "expected": p.expected, "observed": trim(observed),
            "ok": bool(ok), "seconds": round(time.perf_counter() - tic, 1), "probe_error": err,
            "tmp": str(tmp) if keep else ""}


def _commit() -> dict:
    def git(*a):
        r = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None
    try:
        sha = git("rev-parse", "HEAD")
        st = git("status", "--porcelain", "--untracked-files=no")
        branch = git("rev-parse", "--abbrev-ref", "HEAD")
    except (OSError, subprocess.SubprocessError):
        sha = st = branch = None
    return {"commit": sha, "dirty": None if st is None else bool(st), "branch": branch}


def _md_cell(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _neutral(text):
    """``text`` with this machine's directories named neutrally (the checkout dropped, the temporary directory
    as ``<tmp>``, the home directory as ``~``): the table is committed, the machine's layout is not."""
    if not isinstance(text, str):
        return text
    for root, repl in ((str(REPO) + "/", ""), (tempfile.gettempdir().rstrip("/") + "/", "<tmp>/"),
                       ("/tmp/", "<tmp>/"), (str(Path.home()) + "/", "~/")):
        text = text.replace(root, repl)
    return text


def write_outputs(rows: list[dict], out: Path, stem: str, wall: float) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{k: _neutral(v) for k, v in r.items()} for r in rows]
    info = _commit()
    n_ok = sum(r["ok"] for r in rows)
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    cols = ["n", "probe", "ok", "observed", "expected", "problem", "seconds", "probe_error"]
    side = csv_path.with_name(csv_path.name + ".meta.json")  # the CSV's provenance, beside it (a plain CSV)
    side.write_text(json.dumps({**info, "command": "python experiments/gate_probes.py"}, indent=2) + "\n")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for i, r in enumerate(rows, 1):
            w.writerow({**r, "n": i})
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    L = ["# Gate probes", "",
         f"Commit `{info['commit']}`" + (" (**dirty** tree)" if info["dirty"] else " (clean tree)") +
         f", branch `{info['branch']}`; {when}; Python {sys.version.split()[0]}; {wall:.0f} s.",
         "", f"**{n_ok} of {len(rows)} probes behave correctly.**", "",
         "Produced by `python experiments/gate_probes.py` (each probe in a fresh temporary directory, with this "
         "checkout on PYTHONPATH). *expected* is the correct behaviour; *observed* is what this commit does.", "",
         "| # | probe | problem | expected | observed | ok |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        L.append(f"| {i} | `{r['probe']}` | {_md_cell(r['problem'])} | {_md_cell(r['expected'])} | "
                 f"{_md_cell(r['observed'])} | {'yes' if r['ok'] else '**no**'} |")
    md_path.write_text("\n".join(L) + "\n")
    return csv_path, md_path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these probes")
    ap.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="leave these probes out")
    ap.add_argument("--quick", action="store_true", help="leave out the probes marked slow")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the table goes (default results/gate)")
    ap.add_argument("--stem", default="probes", help="file names <stem>.csv and <stem>.md (default probes)")
    ap.add_argument("--list", action="store_true", help="print the registry and exit")
    ap.add_argument("--keep", action="store_true", help="keep each probe's temporary directory")
    args = ap.parse_args(argv)
    known = [p.name for p in REGISTRY]
    unknown = [n for n in (args.only or []) + args.skip if n not in known]
    if unknown:
        ap.error(f"unknown probe(s) {unknown}; known: {', '.join(known)}")
    if args.list:
        for i, p in enumerate(REGISTRY, 1):
            print(f"{i:2d} {p.name}{' [slow]' if p.slow else ''}\n   problem:  {p.problem}\n   expected: {p.expected}")
        return 0
    chosen = [p for p in REGISTRY if (not args.only or p.name in args.only) and p.name not in args.skip
              and not (args.quick and p.slow)]
    tic = time.perf_counter()
    rows = []
    for i, p in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {p.name} ...", end=" ", file=sys.stderr, flush=True)
        row = run_probe(p, keep=args.keep)
        rows.append(row)
        print(f"{'ok ' if row['ok'] else 'NOT'} ({row['seconds']:.0f} s) {row['observed'][:110]}", file=sys.stderr)
    wall = time.perf_counter() - tic
    csv_path, md_path = write_outputs(rows, args.out, args.stem, wall)
    n_ok = sum(r["ok"] for r in rows)
    print(f"{n_ok} of {len(rows)} probes behave correctly ({wall:.0f} s); table: {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
