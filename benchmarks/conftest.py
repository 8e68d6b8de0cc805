"""Benchmark settings: collect bench_*.py, pin torch threads, print the tokens/s summary.

`make bench` runs ``pytest benchmarks --benchmark-only``.  Each benchmark stores the tokens it
generated per call in ``benchmark.extra_info["tokens"]``; at the end of the session this file
prints tokens/s (tokens / median time per call) for every benchmark and the ratio of the
vectorised speculative sampler to the per-sequence Python loop.

BENCH_THREADS (default 2) sets torch.set_num_threads; BENCH_B overrides the batch size of the
vectorised benchmarks (default 1,000,000) for a quick run; BENCH_VERIFY_DRAWS the draws per scenario
of the verification throughput benchmark (bench_verify.py, default 200,000).
"""
import os

import pytest
import torch

THREADS = int(os.environ.get("BENCH_THREADS", "2"))
torch.set_num_threads(THREADS)


def pytest_collect_file(file_path, parent):
    # a bench file named on the command line is collected by pytest itself (once is enough)
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def _rates(config):
    session = getattr(config, "_benchmarksession", None)
    out = {}
    for bench in getattr(session, "benchmarks", []) or []:
        if bench.extra_info.get("role") == "finite_check":
            out[bench.name] = (float("nan"), float("nan"), bench.extra_info)
            continue
        tokens = bench.extra_info.get("tokens")
        if tokens and bench.stats and bench.stats.rounds:
            cpu = bench.extra_info.get("cpu_s")
            out[bench.name] = (tokens / bench.stats.median, tokens / cpu if cpu else float("nan"), bench.extra_info)
    return out


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rates = _rates(config)
    if not rates:
        return
    tr = terminalreporter
    tr.section("tokens per second (tokens generated / median seconds per call)")
    import platform
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    tr.write_line(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
                  f"{platform.processor() or platform.machine()}" + (f", load average {load[0]:.2f}" if load else ""))
    tr.write_line(f"  {'benchmark':<26s} {'M tokens/s':>11s} {'M tokens/CPU-s':>15s}   workload")
    for name, (rate, cpu_rate, info) in sorted(rates.items()):
        if info.get("role") == "finite_check":
            continue
        tr.write_line(f"  {name:<26s} {rate / 1e6:11.3f} {cpu_rate / 1e6:15.3f}   {info.get('what', '')}")
    spec = [(r, c) for r, c, i in rates.values() if i.get("role") == "speculative"]
    loop = [(r, c) for r, c, i in rates.values() if i.get("role") == "loop"]
    if spec and loop:
        (s, sc), (lp, lc) = spec[0], loop[0]
        tr.write_line(f"speculative: {s / 1e6:.2f} M tokens/s, loop: {lp:,.0f} tokens/s, ratio {s / lp:,.0f}")
        tr.write_line(f"per CPU-second: speculative {sc / 1e6:.2f} M, loop {lc:,.0f}, ratio {sc / lc:,.0f}")
    _print_check_cost(tr, rates)
    _print_scaling(tr, rates)
    _print_certificate_cost(tr, rates)


def _print_scaling(tr, rates):
    """Verification throughput at 1 worker and every core (bench_verify.py), and the scaling efficiency."""
    runs = {i["workers"]: r for r, _, i in rates.values() if i.get("role") == "verify"}
    if 1 in runs and len(runs) > 1:
        n = max(runs)
        tr.write_line(f"verify: {runs[1] / 1e6:.2f} M tokens/s at 1 worker, {runs[n] / 1e6:.2f} M at {n} workers; "
                      f"scaling efficiency {runs[n] / (n * runs[1]):.0%}")


def _print_certificate_cost(tr, rates):
    """What the reference sampler's certificates cost, per scenario (bench_verify.py's ``certificates``)."""
    for _, _, info in sorted(rates.values(), key=lambda x: x[2].get("workers", 0)):
        certs = info.get("certificates") if info.get("role") == "verify" else None
        if not certs:
            continue
        tr.write_line(f"verify at {info['workers']} worker(s): {info['wall_total_s']:.0f} s wall, {info['cpu_s']:.0f} "
                      f"CPU-s; per scenario: CPU-s to certify the stated ε, bound x sqrt(CPU-s), * = certified here")
        tr.write_line("  " + ", ".join(f"{name} {c['certify_cpu_s']:.3g} ({c['eps_sqrt_cpu']:.2g}"
                                       f"{'*' if c['certified'] else ''})" for name, c in certs.items()))


def _print_check_cost(tr, rates):
    for _, _, info in rates.values():
        if info.get("role") != "finite_check":
            continue
        tr.write_line(f"finiteness check of the warped laws, on vs off (medians of {info['repeats']} alternated calls):")
        tr.write_line(f"  {'workload':<36s} {'on tokens/s':>12s} {'off tokens/s':>13s} {'on/off':>7s} {'in check':>9s}")
        for r in info["rows"]:
            tr.write_line(f"  {r['workload']:<36s} {r['on']:12,.0f} {r['off']:13,.0f} {r['ratio']:7.3f} "
                          f"{r['share']:8.2%}")
        tr.write_line("  (on/off: ratio of the tokens/s medians, noisy on a shared machine; in check: share of one "
                      "call's wall time spent inside the checks, timed in place)")
