"""`python -m harness --help` lists every command whole; every command's `--help` shows its defaults; the
transformers deprecation dropped on our paths is that one record only (issue 40, item 7)."""
import argparse
import logging
import re

import pytest

from harness.cli import COMMANDS, HelpFormatter, _DropDeprecation, build_parser, main, quiet_libraries


def test_help_lists_every_command_whole(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    description = " ".join(out.split("\n\n")[1].split())
    assert description.rstrip().endswith("its options."), f"the description is cut: {description!r}"
    listed = re.findall(r"^    (\S+)\s", out, flags=re.M)  # the command column of the `commands:` list
    assert listed == list(COMMANDS)
    for name in COMMANDS:
        assert re.search(rf"[\s,]{re.escape(name)}[,.]", description), f"{name} missing from the description"


def _subparsers():
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _has_default(action) -> bool:
    return (bool(action.option_strings) and not isinstance(action, argparse._HelpAction)
            and action.default not in (None, False, argparse.SUPPRESS))


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_with_a_default_shows_it(name):
    sub = _subparsers()[name]
    assert sub.formatter_class is HelpFormatter
    text = " ".join(sub.format_help().split())
    for action in filter(_has_default, sub._actions):
        fmt = sub._get_formatter()
        shown = fmt._expand_help(action) if action.help else ""
        assert "default" in shown, f"{name} {action.option_strings[0]}: no default in {shown!r}"
    assert "--help" in text


def test_sample_help_shows_defaults(capsys):
    assert main(["sample", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-new-tokens" in out
    n_opts = sum(1 for a in _subparsers()["sample"]._actions if _has_default(a))
    assert n_opts >= 20 and out.count("default") >= n_opts


def test_formatter_appends_only_where_missing():
    ap = argparse.ArgumentParser(formatter_class=HelpFormatter)
    ap.add_argument("--n", type=int, default=4, help="draws")
    ap.add_argument("--m", type=int, default=3, help="draws (default: three)")
    ap.add_argument("--flag", action="store_true", help="a switch")
    ap.add_argument("--opt", default=None, help="optional")
    text = " ".join(ap.format_help().split())
    assert "draws (default: 4)" in text and "(default: three)" in text
    assert "a switch (default" not in text and "optional (default" not in text


def test_only_the_generation_config_deprecation_is_dropped():
    quiet_libraries()
    logger = logging.getLogger(_DropDeprecation.LOGGER)
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    h = Catch()
    logger.addHandler(h)
    try:
        logger.warning("Passing `generation_config` together with generation-related arguments=({'x'}) is "
                       "deprecated and will be removed in future versions.")
        logger.warning("some other transformers warning")
    finally:
        logger.removeHandler(h)
    assert seen == ["some other transformers warning"]
