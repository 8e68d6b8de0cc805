"""What mistral.rs's Python API does on this CPU, asked of the engine itself (issue 41.6): run by its own Python.

    .venv-mistralrs/bin/python experiments/mistralrs_probe.py <exported model folder>

(``python -c "from harness.samples.engines.mistralrs_engine import export; print(export('specimpl/assets/exact_pair/target'))"``
prints the folder.)  Each line is one question and the engine's answer, as a markdown table on stdout: a seed, the
MTP speculative path with and without PagedAttention, ``n_choices`` > 1, the CPU KV cache's default precision and
whether two processes draw the same completions.  Imports only the standard library and mistralrs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys


def _runner(folder: str, **kw):
    import mistralrs as m
    which = m.Which.Plain(model_id=folder, arch=m.Architecture.Llama, dtype=m.ModelDType.F32)
    return m.Runner(which=which, token_source="none", **kw)


def _complete(r, n: int = 1):
    import mistralrs as m
    return r.send_completion_request(m.CompletionRequest(prompt="abcab", model="x", max_tokens=8, temperature=1.0,
                                                         ignore_eos=True, n_choices=n))


def _try(fn) -> str:
    try:
        return f"accepted: {fn()}"
    except Exception as e:  # the engine's answer, whatever it raises
        return f"refused: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


QUESTIONS = {  # name -> (question, what the fresh process runs)
    "seed": ("Runner(seed=1)", lambda f: _try(lambda: _runner(f, seed=1) and "a seeded engine")),
    "mtp": ("Runner(mtp_model=..., mtp_n_predict=4): speculative decoding",
            lambda f: _try(lambda: _runner(f, mtp_model=f, mtp_n_predict=4) and "an MTP engine")),
    "mtp-paged": ("Runner(mtp_model=..., paged_attn=True)",
                  lambda f: _try(lambda: _runner(f, mtp_model=f, mtp_n_predict=4, paged_attn=True) and "an MTP engine")),
    "n-choices": ("CompletionRequest(n_choices=4)",
                  lambda f: (lambda res: f"{len(res.choices)} choice(s) returned, index "
                                         f"{[c.index for c in res.choices]}")(_complete(_runner(f), 4))),
    "draws": ("ten unseeded completions", lambda f: json.dumps([_complete(r).choices[0].text for r in [_runner(f)]
                                                                for _ in range(10)])),
}


def _ask(folder: str, name: str) -> str:
    """The answer of a fresh process (a failed seed leaves the process unable to build another engine)."""
    out = subprocess.run([sys.executable, __file__, folder, "--ask", name], capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else f"the process failed (exit {out.returncode})"


def main(argv: list[str]) -> int:
    folder = argv[0]
    if argv[1:2] == ["--ask"]:
        print(QUESTIONS[argv[2]][1](folder))
        return 0
    import importlib.metadata as im
    rows = [("mistralrs version", im.version("mistralrs"))]
    rows += [(QUESTIONS[q][0], _ask(folder, q)) for q in ("seed", "mtp", "mtp-paged", "n-choices")]
    a, b = json.loads(_ask(folder, "draws")), json.loads(_ask(folder, "draws"))
    rows.append(("two fresh processes, ten unseeded completions each", f"{sum(x == y for x, y in zip(a, b))} of 10 equal"))
    rows.append(("CPU KV cache precision by default", "f32" if os.environ.get("MISTRALRS_CPU_KV_F32") else
                 "f16 (its log: 'Using f16 KV cache on CPU (set MISTRALRS_CPU_KV_F32=1 for f32)')"))
    print("| question | mistral.rs on this CPU |\n|---|---|")
    for q, a_ in rows:
        print(f"| {q} | {a_.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
