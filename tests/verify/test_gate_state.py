"""Saved state cannot run code (issue 45, item 2): the resume state of `verify` is plain data in ``.npz`` files
(harness.core.safestate) whose header is checked before anything else is decoded; a planted pickle, under its
old name or the new one, is never loaded and the run says so."""
import pickle
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

from harness.core import safestate
from harness.laws.scenarios import load_scenario, load_settings
from harness.verify import draw as drawmod
from harness.verify.pipeline import verify
from harness.verify.sampler import load_sampler

GOOD = """
    from specimpl import speculative_generate

    def fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id=None, generator=None):
        return speculative_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                                    eos_token_id=eos_token_id, generator=generator)
"""


class Hostile:
    """Unpickling this creates the marker file (a stand-in for any command)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _run(src, out):
    return verify(sampler=load_sampler(f"{src}:fn"), sampler_label="my.py:fn", scenarios=[load_scenario("base")],
                  settings=load_settings(), draws=2000, controls=False, out=out, figures=False, progress=False,
                  von_neumann=False)


def test_planted_pickles_never_run(tmp_path, monkeypatch, capsys):
    src = tmp_path / "my.py"
    src.write_text(textwrap.dedent(GOOD))
    out, marker = tmp_path / "out", tmp_path / "marker"
    monkeypatch.setattr(drawmod.RunState, "clear", lambda self: None)  # keep the state, as an interrupted run does
    first = _run(src, out)
    saved = sorted((out / "_tmp_state").glob("*.npz"))
    assert len(saved) == 2  # the sampler's run and its target-only baseline
    hostile = pickle.dumps({"fingerprint": "x", "obj": Hostile(marker)})
    saved[0].write_bytes(hostile)  # a pickle under the new name
    (saved[1].with_suffix(".pkl")).write_bytes(hostile)  # the old format, beside a good shard
    with np.load(saved[1], allow_pickle=False) as z:  # and a good shard's header replaced by an object array
        members = {k: z[k] for k in z.files}
    members["header"] = np.array([Hostile(marker)], dtype=object)
    bad = out / "_tmp_state" / ("0" * 16 + ".npz")
    np.savez(bad, **members)
    capsys.readouterr()
    second = _run(src, out)
    err = capsys.readouterr().err
    assert not marker.exists()  # nothing ran
    with pytest.raises(safestate.StateFormatError):
        safestate.read_header(bad)  # an object array is refused by numpy (allow_pickle=False), not unpickled
    assert not marker.exists()
    assert second.meta["resume"]["stale_shards_redrawn"] == 1 and second.meta["resume"]["reused_shards"] == 1
    assert second.meta["resume"]["ignored_files"] == [saved[1].with_suffix(".pkl").name]
    assert "not in the saved-state format" in err and "never opened" in err
    assert second.table.pvalue.tolist() == first.table.pvalue.tolist()  # redrawn: the same draws
    monkeypatch.undo()
    drawmod.RunState(out).clear()
    assert not (out / "_tmp_state").exists()  # the planted files go with the folder
    assert not marker.exists()


@dataclass
class Point:
    x: int
    y: np.ndarray


def test_safestate_round_trip_and_refusals(tmp_path):
    obj = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "t": (1, 2.5, None, "s"), 3: [np.float32(1.5)],
           "p": Point(4, np.zeros(2, np.uint8)), "c": np.complex128(1 + 2j), "nan": float("nan")}
    path = tmp_path / "s.npz"
    path.write_bytes(safestate.dumps({"fingerprint": "f"}, obj, {"Point": Point}))
    assert safestate.read_header(path)["fingerprint"] == "f"
    back = safestate.read_body(path, {"Point": Point})
    assert back["t"] == (1, 2.5, None, "s") and back[3][0].dtype == np.float32 and back["c"] == 1 + 2j
    assert np.array_equal(back["a"], obj["a"]) and back["a"].dtype == np.int64 and np.isnan(back["nan"])
    assert isinstance(back["p"], Point) and back["p"].x == 4 and back["p"].y.dtype == np.uint8
    with pytest.raises(safestate.StateFormatError, match="Point"):
        safestate.read_body(path)  # a dataclass not on the caller's list is not built
    with pytest.raises(TypeError):
        safestate.dumps({}, {"f": object()})
    with pytest.raises(TypeError):
        safestate.dumps({}, np.array([object()], dtype=object))
    path.write_bytes(b"not a zip")
    with pytest.raises(safestate.StateFormatError):
        safestate.read_header(path)


def test_a_symlinked_state_folder_is_never_followed(tmp_path):
    """probe45: `<out>/_tmp_state` planted as a link to another folder: its files were read as saved state and,
    at the end of the run, every .npz / .pkl there was deleted.  Now the link is removed, its target untouched."""
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    out.mkdir()
    (elsewhere / "data.npz").write_bytes(b"someone's data")
    (elsewhere / "model.pkl").write_bytes(b"someone's model")
    (out / "_tmp_state").symlink_to(elsewhere)
    state = drawmod.RunState(out)
    state.clear()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["data.npz", "model.pkl"]
    assert not (out / "_tmp_state").exists() and not (out / "_tmp_state").is_symlink()
    assert state.foreign == [] and state.summary()["ignored_link"] == str(elsewhere)
    assert any("symbolic link" in line and "never followed" in line for line in state.announcement())


# ------------------------------------------------------------------ probe 47, class 2: headers that attack the reader
@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs mkfifo")
def test_a_foreign_headers_module_paths_are_never_opened(tmp_path):
    """A saved shard of other code whose header lists /dev/zero (MemoryError, exit 3) or a FIFO (a hang) among its
    module files: the paths were hashed before the fingerprint was compared."""
    import os
    import time
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    state = drawmod.RunState(tmp_path / "o")
    state.dir.mkdir(parents=True, exist_ok=True)
    for slot, path in (("a" * 16, "/dev/zero"), ("b" * 16, str(fifo))):
        (state.dir / f"{slot}{safestate.SUFFIX}").write_bytes(
            safestate.dumps({"fingerprint": "0" * 64, "modules": {path: "0" * 64}}, {"x": 1}))
        t0 = time.monotonic()
        assert state.load(slot, "1" * 64) is None and time.monotonic() - t0 < 5
    assert state.stale == ["a" * 16, "b" * 16]
    from harness.core.fingerprint import changed_module_files, file_sha256
    assert file_sha256("/dev/zero") is None and file_sha256(fifo) is None  # never opened: not regular files
    assert changed_module_files({str(fifo): "0" * 64}) == [str(fifo)]


def test_a_member_declaring_more_bytes_than_it_holds_is_not_a_state_file(tmp_path):
    """An .npz whose header.npy claims 2**40 bytes (16 held): numpy allocated first (MemoryError, exit 3)."""
    import io
    import zipfile
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "|u1", "fortran_order": False, "shape": (2 ** 40,)})
    path = tmp_path / f"{'c' * 16}{safestate.SUFFIX}"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.npy", hdr.getvalue() + b"\0" * 16)
    with pytest.raises(safestate.StateFormatError, match="declares 1,099,511,627,776 bytes"):
        safestate.read_header(path)
