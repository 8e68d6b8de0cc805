"""Sweep cells are keyed on content (harness.speedup.sweep.cli.cell_key): a cell stored by other code is recomputed,
a reused cell keeps its own provenance, and the tables are staged and moved in together."""
import argparse
import json

from harness.core import fingerprint
from harness.speedup.sweep import cli as sweep

TINY = """
name = "tiny"
suites = ["grid", "synthetic"]
[grid]
alpha = [0.0, 0.9, 4]
c = [0.05, 1.0, 3]
k_max = 3
[synthetic]
alpha = [0.5]
c = [0.5]
k = [2]
max_new_tokens = 8
repeats = 1
profile_repeats = 1
clock = "virtual"
"""


def _args(config, out, **kw):
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    argv = ["--config", str(config), "--out", str(out), "--no-progress"]
    for k, v in kw.items():
        argv += [f"--{k}"] + ([] if v is True else [str(v)])
    return p.parse_args(argv)


def _counting(monkeypatch):
    calls, real = [], sweep.run_cell

    def counting(cell, cfg, code=None):
        calls.append(cell.id)
        return real(cell, cfg, code)
    monkeypatch.setattr(sweep, "run_cell", counting)
    return calls


def test_cell_key_follows_code_settings_and_seed(tmp_path):
    (tmp_path / "t.toml").write_text(TINY)
    cfg = sweep.load_config(tmp_path / "t.toml")
    cell = sweep.plan(cfg)[1]
    k = sweep.cell_key(cell, cfg)
    assert sweep.cell_key(cell, cfg) == k
    assert sweep.cell_key(cell, {**cfg, "seed": cfg["seed"] + 1}) != k
    assert sweep.cell_key(cell, cfg, code="other code") != k
    assert sweep.cell_key(sweep.plan(cfg)[0], cfg) != k


def test_cell_of_other_code_is_recomputed_and_reused_cells_keep_provenance(tmp_path, monkeypatch, capsys):
    (tmp_path / "t.toml").write_text(TINY)
    out = tmp_path / "out"
    calls = _counting(monkeypatch)
    assert sweep.run(_args(tmp_path / "t.toml", out)) == 0
    assert len(calls) == 2
    # stamp the stored cells as computed by an older commit, and one of them by other code
    paths = sorted((out / "cells").rglob("*.json"))
    for i, p in enumerate(paths):
        rec = json.loads(p.read_text())
        rec["meta"]["commit"], rec["meta"]["dirty"] = "0" * 40, False
        if i == 0:
            rec["key"] = fingerprint.fingerprint("older code")
        p.write_text(json.dumps(rec))
    calls.clear()
    capsys.readouterr()
    assert sweep.run(_args(tmp_path / "t.toml", out)) == 0
    assert calls == [json.loads(paths[0].read_text())["id"]]
    assert "1 stored cell(s) were computed by other code" in capsys.readouterr().err
    reused = json.loads(paths[1].read_text())
    assert reused["meta"]["commit"] == "0" * 40  # not re-stamped
    prov = json.loads((out / "meta.json").read_text())["sweep"]["cells_provenance"]
    assert {p["commit"] for p in prov if p["commit"] == "0" * 40} == {"0" * 40}
    assert sum(p["cells"] for p in prov) == 2
    # a rerun that only reuses cells stamps the tables with the cells' commit, not the current one
    for p in (out / "cells").rglob("*.json"):
        rec = json.loads(p.read_text())
        rec["meta"]["commit"], rec["meta"]["dirty"] = "1" * 40, False
        p.write_text(json.dumps(rec))
    calls.clear()
    assert sweep.run(_args(tmp_path / "t.toml", out)) == 0
    assert calls == []
    meta = json.loads((out / "meta.json").read_text())
    assert meta["commit"] == "1" * 40 and meta["dirty"] is False and "tables_built_by" in meta


def test_list_marks_cells_of_other_code(tmp_path, capsys):
    (tmp_path / "t.toml").write_text(TINY)
    out = tmp_path / "out"
    assert sweep.run(_args(tmp_path / "t.toml", out)) == 0
    p = next((out / "cells").rglob("*.json"))
    rec = json.loads(p.read_text())
    rec.pop("key")  # a cell written before cells had keys
    p.write_text(json.dumps(rec))
    capsys.readouterr()
    assert sweep.run(_args(tmp_path / "t.toml", out, list=True)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("todo" in line for line in lines) == 1
    assert sum("stored by other code" in line for line in lines) == 1


def test_seed_option_makes_an_independent_run_and_a_bad_one_is_one_clear_error(tmp_path):
    import pytest
    from harness.core.errors import UsageError
    (tmp_path / "t.toml").write_text(TINY)
    assert sweep._overrides(_args(tmp_path / "t.toml", tmp_path / "o", seed=7)) == {"seed": 7}
    with pytest.raises(UsageError, match="`--seed` must be an integer >= 0; got 'x'"):
        sweep._overrides(_args(tmp_path / "t.toml", tmp_path / "o", seed="x"))
