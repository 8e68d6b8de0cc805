"""The exit-code contract of `python -m harness` (harness.core.errors): 0 ok, 1 lossy, 2 usage or configuration
error (one line), 3 the sampler or a model failed (summary on stderr, traceback in <out>/error.log), 4
inconclusive, 130 interrupted.  The CLI runs in-process through harness.cli.main."""
import os
import textwrap
import threading

import pandas as pd
import pytest

import harness.verify.calibrate
import harness.verify.cli
from harness.cli import main
from harness.core.errors import EXIT_CODES, SamplerError, UsageError

QUIET = ["--no-real-model", "--no-figures", "--no-progress"]
SIG = ("def fn(target, draft, prompts, *, k, max_new_tokens, config=None, eos_token_id=None, "
       "generator=None):\n")


def _lines(text):
    return [ln for ln in text.splitlines() if ln.strip()]


def _verify_sampler(tmp_path, monkeypatch, capsys, body, draws=2000):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text(textwrap.dedent(body))
    rc = main(["verify", "--sampler", "s.py:fn", "--scenario", "base", "--draws", str(draws), *QUIET,
               "--out", "out"])
    return rc, capsys.readouterr().err


# ------------------------------------------------------------------------------ broken samplers: 3
def test_a_sampler_that_raises_exits_3_with_the_traceback_in_a_log(tmp_path, monkeypatch, capsys):
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, SIG + "    raise RuntimeError('boom here')\n")
    assert rc == 3
    assert "Traceback" not in err
    last = _lines(err)[-1]
    assert "RuntimeError: boom here" in last and "out/error.log" in last
    log = (tmp_path / "out" / "error.log").read_text()
    assert "Traceback (most recent call last)" in log and "boom here" in log
    # the headline says what the exit status says (it read "LOSSY (1 failed; exit 1)" before exit 3)
    assert "verify s.py:fn: FAILED (1 failed; exit 3)" in _lines(err)[-2]
    assert "**Result: FAILED**" in (tmp_path / "out" / "summary.md").read_text()


@pytest.mark.parametrize("body, words", [
    ("import sys\n" + SIG + "    sys.exit(0)\n", "sys.exit(0)"),
    (SIG + "    raise KeyboardInterrupt\n", "KeyboardInterrupt"),
])
def test_sys_exit_or_keyboard_interrupt_inside_a_sampler_is_its_failure(tmp_path, monkeypatch, capsys, body, words):
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, body)
    assert rc == 3
    assert words in _lines(err)[-1] and "Traceback" not in err


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="SIGINT is handled in the main thread only")
def test_a_real_ctrl_c_during_a_sampler_call_is_an_interrupt(tmp_path, monkeypatch, capsys):
    body = "import os, signal\n" + SIG + "    os.kill(os.getpid(), signal.SIGINT)\n"
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, body)
    assert rc == 130
    assert "interrupted" in err and "Traceback" not in err


def test_wrong_output_shape_exits_3_naming_the_shape(tmp_path, monkeypatch, capsys):
    body = """
        import torch
        from specimpl import speculative_generate
        from specimpl.speculative import GenerationResult

        def fn(target, draft, prompts, *, k, max_new_tokens, config=None, eos_token_id=None, generator=None):
            res = speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                       eos_token_id=eos_token_id, generator=generator)
            return GenerationResult(tokens=res.tokens[:, :-1], lengths=res.lengths, stats=res.stats,
                                    timings=res.timings)
    """
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, body)
    assert rc == 3
    assert "shape" in _lines(err)[-1] and "Traceback" not in err


def test_wrong_signature_is_refused_up_front_naming_it(tmp_path, monkeypatch, capsys):
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, "def fn(a, b):\n    return None\n")
    assert rc == 2
    assert len(_lines(err)) == 1 and "fn(a, b)" in err and "max_new_tokens" in err
    assert not (tmp_path / "out").exists()


def test_a_lossy_sampler_exits_1(tmp_path, monkeypatch, capsys):
    body = """
        import torch
        from specimpl.speculative import GenerationResult

        def fn(target, draft, prompts, *, k, max_new_tokens, config=None, eos_token_id=None, generator=None):
            B = len(prompts)
            return GenerationResult(tokens=torch.zeros(B, max_new_tokens, dtype=torch.long),
                                    lengths=torch.full((B,), max_new_tokens), stats=None, timings=None)
    """
    rc, err = _verify_sampler(tmp_path, monkeypatch, capsys, body)
    assert rc == 1
    assert "Traceback" not in err and not (tmp_path / "out" / "error.log").exists()
    lines = _lines(err)
    assert lines[-1].startswith("verify s.py:fn: LOSSY") and "exit 1" in lines[-1]
    loss = next(x for x in lines if x.strip().startswith("loss: s.py:fn on base"))
    assert "TV ≈ " in loss and (" on position[" in loss and "token 0: observed 100 % vs exact" in loss or  # where:
                                " on joint[0:3]" in loss and "tokens (0, 0, 0): observed 100 % vs exact" in loss)  # token 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**Result: LOSSY**" in summary and "## Where the loss is" in summary
    assert "P(inconclusive | lossless)" not in summary.split("## Certificates")[0]  # no planning on a lossy run
    assert "certifies at" not in err and "To certify" not in summary


def test_the_codes_and_words_of_the_three_verdicts():
    from harness.core.verdict import combine, exit_status, headline
    assert [exit_status(v) for v in ("certified", "lossy", "inconclusive")] == [0, 1, 4]
    assert [headline(v) for v in ("certified", "lossy", "inconclusive")] == ["PASS", "LOSSY", "INCONCLUSIVE"]
    assert combine(["certified", "inconclusive"]) == "inconclusive" and combine(["inconclusive", "lossy"]) == "lossy"
    assert combine(["certified"]) == "certified" and combine([]) == "inconclusive"
    with pytest.raises(ValueError, match="`verdict` must be one of"):
        combine(["FAIL"])


def test_the_rerun_command_replaces_the_sizing_option():
    from harness.cli import build_parser
    from harness.core.verdict import rerun_command
    import shlex
    argv = ["--scenario", "base", "--draws=20000", "--out", "my dir", "--draws", "5", "--seed", "7"]
    cmd = rerun_command("verify", argv, {"--draws": 645718})
    assert cmd == "python -m harness verify --scenario base --out 'my dir' --seed 7 --draws 645718"
    args = build_parser()[0].parse_args(shlex.split(cmd)[3:])
    assert (args.draws, args.seed, str(args.out), args.scenario) == (645718, 7, "my dir", ["base"])


# --------------------------------------------------------------------------- bad options: 2, one line
@pytest.mark.parametrize("extra, words", [
    (["--seed", "-1"], "`--seed`"),
    (["--threads", "0"], "`--threads`"),
    (["--scenario", "base"], "'base' more than once"),
    (["--draws", "1"], "`--draws`"),
    (["--draws", "many"], "--draws"),
    (["--scenario", "no_such_scenario"], "no_such_scenario"),
])
def test_bad_verify_options_exit_2_with_one_line(tmp_path, monkeypatch, capsys, extra, words):
    monkeypatch.chdir(tmp_path)
    rc = main(["verify", "--scenario", "base", *QUIET, "--out", "out", *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(_lines(err)) == 1 and words in err
    assert not (tmp_path / "out").exists()


def test_an_out_folder_that_cannot_be_created_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    rc = main(["verify", "--scenario", "base", *QUIET, "--out", "afile/out"])
    err = capsys.readouterr().err
    assert rc == 2 and len(_lines(err)) == 1 and "`--out`" in err and "afile/out" in err


@pytest.mark.parametrize("argv, words", [
    (["sweep", "--suites", "", "--list", "--out", "sw"], "`--suites`"),
    (["sweep", "--suites", "grid,lottery", "--list", "--out", "sw"], "`--suites`"),
    (["sweep", "--config", "bad_sweep.toml", "--list", "--out", "sw"], "bad_sweep.toml: key `grid.alpah`"),
    (["sweep", "--config", "missing.toml", "--list"], "missing.toml"),
    (["report", "--results", "no_such_results"], "`--results` must be a sweep's results folder; got 'no_such_results'"),
    (["report", "--results", ".", "--formats", "gif"], "`--results`"),
    (["calibrate", "--seeds", "0"], "`--seeds`"),
    (["calibrate", "--scenario", "base", "--scenario", "base"], "more than once"),
    (["calibrate", "--threads", "0"], "`--threads`"),
    (["alpha", "--seed", "-3"], "`--seed`"),
    (["pit", "--alpha", "2"], "`--alpha`"),
    (["pit", "--only", "reference", "--only", "reference"], "more than once"),
])
def test_bad_options_of_every_command_exit_2_with_one_line(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad_sweep.toml").write_text('name = "probe"\n[grid]\nalpah = [0.0, 0.9, 10]\n')
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert len(_lines(err)) == 1 and words in err and "Traceback" not in err


def test_report_formats_are_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "meta.json").write_text("{}")
    assert main(["report", "--results", "res", "--formats", "gif"]) == 2
    assert "`--formats`" in capsys.readouterr().err


# ------------------------------------------------------------------------ the one mapping of main
@pytest.mark.parametrize("exc, code, words", [
    (UsageError("`x` must be y; got 'z'"), 2, "`x` must be y"),
    (SamplerError("the sampler failed: E: e", "Traceback (most recent call last):\n  fake\n"), 3, "error.log"),
    (RuntimeError("internal"), 3, "RuntimeError: internal"),
    (KeyboardInterrupt(), 130, "interrupted"),
])
def test_main_maps_each_exception_to_its_status(tmp_path, monkeypatch, capsys, exc, code, words):
    def fake_run(args):
        raise exc
    monkeypatch.setattr(harness.verify.cli, "run", fake_run)
    rc = main(["verify", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == code and words in err and "Traceback" not in err
    if code == 3:
        assert "Traceback" in (tmp_path / "o" / "error.log").read_text()


def test_calibrate_exits_1_when_the_family_wise_rate_is_inconsistent(tmp_path, monkeypatch, capsys):
    def fake(settings, scenarios, **kw):
        fam = pd.DataFrame({"family_level": [1e-4, 0.01], "consistent": [False, True]})
        return {"family": fam, "console": "calibrate: 2 seeds"}
    monkeypatch.setattr(harness.verify.calibrate, "calibrate", fake)
    assert main(["calibrate", "--scenario", "base", "--seeds", "2", "--draws", "500", "--out", str(tmp_path)]) == 1
    assert "inconsistent" in capsys.readouterr().err

    def fake_ok(settings, scenarios, **kw):
        return {"family": pd.DataFrame({"family_level": [1e-4], "consistent": [True]}), "console": "ok"}
    monkeypatch.setattr(harness.verify.calibrate, "calibrate", fake_ok)
    assert main(["calibrate", "--scenario", "base", "--seeds", "2", "--draws", "500", "--out", str(tmp_path)]) == 0


def test_help_documents_the_contract(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in EXIT_CODES:
        assert f"  {code} " in out
    assert main(["verify", "--help"]) == 0
    assert "130" in capsys.readouterr().out


def test_transformers_bars_silenced_on_our_paths(monkeypatch):
    """transformers' weight-loading bars are off on every command (they interleaved with our own bar), unless the
    user's environment asks for them (HF_HUB_DISABLE_PROGRESS_BARS=0)."""
    import transformers

    from harness.cli import quiet_libraries
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    transformers.utils.logging.enable_progress_bar()
    try:
        quiet_libraries()
        assert not transformers.utils.logging.is_progress_bar_enabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
        transformers.utils.logging.enable_progress_bar()
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
        quiet_libraries()
        assert transformers.utils.logging.is_progress_bar_enabled()
    finally:
        transformers.utils.logging.enable_progress_bar()
