"""Short names of the shipped model pairs, resolved inside the installed ``specimpl`` package.

    resolve_model("exact-markov")            # -> '/…/site-packages/specimpl/assets/exact_pair/markov_target'
    resolve_model("path/to/my_model")        # a folder: returned as given
    python -m harness models                 # name, absolute path and what each is
    python -m harness models --path tiny     # the path alone (for a shell: --model "$(python -m harness models --path tiny)")

Every option that names a local model (``--target``, ``--draft``, ``--tokenizer``; the ``target``/``draft`` keys
of ``[real_model.exact]`` in a verify settings file) takes a short name or a folder, so the shipped pairs can be
named from any directory after ``pip install .``: the paths are found next to the installed ``specimpl``
(``pyproject.toml``'s package-data ships ``specimpl/assets/**``), never relative to the working directory.  A
value that is neither a short name nor an existing path (nor a model cached by ``huggingface_hub``) is bad
input: :class:`~harness.core.errors.UsageError` (exit 2) naming the option, the value and the known names.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import specimpl
from harness.core.errors import UsageError
from harness.core import jsonfile

__all__ = ["ASSETS", "SHIPPED", "ShippedModel", "model_names", "model_path", "resolve_model", "describe",
           "add_arguments", "run"]

ASSETS = Path(specimpl.__file__).resolve().parent / "assets"


@dataclass(frozen=True)
class ShippedModel:
    """One shipped checkpoint: its short name, its folder under ``specimpl/assets`` and what it is for."""

    name: str
    folder: str
    role: str

    @property
    def path(self) -> Path:
        return ASSETS / self.folder


SHIPPED = {m.name: m for m in (
    ShippedModel("tiny", "tiny_pair/target", "the tiny pair's target (bytes of Python stdlib source): pit, alpha, "
                                             "sweep, tune, scored verify-samples"),
    ShippedModel("tiny-draft", "tiny_pair/draft", "the tiny pair's draft"),
    ShippedModel("exact", "exact_pair/target", "the exact pair's target (attention on; law enumerated over the "
                                               "first J tokens): verify's real-model certificate"),
    ShippedModel("exact-draft", "exact_pair/draft", "the exact pair's draft"),
    ShippedModel("exact-markov", "exact_pair/markov_target", "Markov target (attention output zero: law exact at "
                                                             "every position): engines, verify-samples --exact"),
    ShippedModel("exact-markov-draft", "exact_pair/markov_draft", "the exact Markov pair's draft"),
)}


def model_names() -> list[str]:
    """The short names, in the order ``python -m harness models`` prints them."""
    return list(SHIPPED)


def model_path(name: str) -> Path:
    """The absolute folder of the shipped model ``name`` (UsageError for an unknown name)."""
    if name not in SHIPPED:
        raise UsageError(f"`name` must be one of {', '.join(SHIPPED)}; got {name!r}")
    return SHIPPED[name].path


def _cached_on_hub(value: str) -> bool:
    """Whether ``value`` looks like a Hugging Face repo id ('org/name') whose config.json is in the local cache."""
    if value.count("/") != 1 or value.startswith((".", "/", "~")):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
        return isinstance(try_to_load_from_cache(value, "config.json"), str)
    except Exception:  # noqa: BLE001 - no hub library or a malformed id: not cached
        return False


def resolve_model(name_or_path, option: str = "--target") -> str:
    """A short name (:data:`SHIPPED`) -> its absolute folder; an existing path (or a hub id in the local cache) ->
    itself, unchanged; anything else -> UsageError naming ``option``, the value and the known names."""
    value = str(name_or_path)
    if value in SHIPPED:
        return str(SHIPPED[value].path)
    if Path(value).expanduser().exists() or _cached_on_hub(value):
        return value
    raise UsageError(f"`{option}` must be a model folder or a shipped model name ({', '.join(SHIPPED)}; `python -m "
                     f"harness models` lists them); got {value!r}, which is neither")


def _config(path: Path) -> dict:
    try:
        return jsonfile.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def describe(name: str) -> dict:
    """name, path, vocabulary size, layers, hidden size, weights' dtype (read from its config.json), role."""
    m = SHIPPED[name]
    c = _config(m.path)
    return {"name": name, "path": str(m.path), "vocab": c.get("vocab_size"), "layers": c.get("num_hidden_layers"),
            "hidden": c.get("hidden_size"), "dtype": c.get("dtype") or c.get("torch_dtype"), "role": m.role,
            "present": (m.path / "config.json").is_file()}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--path", metavar="NAME", help="print the absolute folder of NAME only (for shell substitution)")


def run(args) -> int:
    """Print the shipped models (or one path); 0, or UsageError (2) for an unknown --path name."""
    if args.path is not None:
        if args.path not in SHIPPED:
            raise UsageError(f"`--path` must be one of {', '.join(SHIPPED)}; got {args.path!r}")
        print(SHIPPED[args.path].path)
        return 0
    rows = [describe(n) for n in SHIPPED]
    w = max(len(n) for n in SHIPPED)
    for r in rows:
        shape = f"V = {r['vocab']}, {r['layers']} layer{'s' if r['layers'] != 1 else ''}, hidden {r['hidden']}, {r['dtype']}"
        missing = "" if r["present"] else "  [MISSING: the package was installed without its assets]"
        print(f"{r['name']:<{w}}  {r['path']}{missing}\n{'':<{w}}  Llama, {shape}; {r['role']}")
    print(f"\nUse a name wherever a local model is asked for, e.g. `--target {rows[0]['name']}`.", file=sys.stderr)
    return 0
