"""`python -m harness sample`: write a sample file (specverify.samples/1) from an engine.

    python -m harness sample --engine ours --method speculative --k 4 --out spec.jsonl
    python -m harness sample --engine ours --method autoregressive --out plain.jsonl --seed 1
    python -m harness sample --engine hf --hf-mode assistant --k 4 --out hf_spec.jsonl
    python -m harness sample --engine hf --hf-mode prompt_lookup --k 4 --out hf_pl.jsonl
    python -m harness sample --engine openai --url http://127.0.0.1:8000/v1 --model tiny --out srv.jsonl
    python -m harness sample --engine ours --control shared_stream --out bug.jsonl   # an engine-level bug

Requests: ``--n-per-prompt`` completions of each of ``--n-prompts`` held-out byte prompts of the tiny pair
(``--prompt-lengths``, ``--prompt-seed``), ids ``p<i>-s<j>``.  ``ours`` and ``hf`` run on the shipped
tiny pair (``--target``/``--draft`` for other local checkpoints); ``openai`` asks an OpenAI-compatible
completions endpoint (:mod:`harness.samples.openai`: bounded concurrency, retries with backoff).  The
file is append-only: a rerun of the same command skips the requests already in it (resume), and refuses
a file drawn under other controls, other prompts (--prompt-seed, --prompt-lengths, --prompt-vocab) or by
another engine configuration (--engine, --method, --hf-mode, --k, --control), naming the option.  One
writer per file: a second ``sample`` of the same ``--out`` is refused while the first runs (the file's
lock); a file holding a request id twice is repaired by ``python -m harness samples-dedupe``.
Exit 0 done, 2 bad options or file, 3 the engine failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

from harness.core.errors import SamplerError, UsageError
from harness.core.limits import check_count
from harness.core.models import model_path, resolve_model
from harness.core.options import check_option, check_out, check_seed
from harness.samples.format import SampleWriter
from harness.samples.format import Controls
from harness.samples.format import read_samples
from harness.samples import producers as P
from specimpl.sampling import SamplingConfig
from specimpl.hf import HFModel, load_pair, load_tiny_pair
from harness.samples.openai import EndpointSpec, check_endpoint, check_waits, produce_openai
from harness.samples.producers import make_requests
from harness.samples.controls import CONTROLS
from harness.samples.engines.llama_sample import SPEC_CHOICES as LLAMA_SPECS, produce_llama
from harness.samples.engines.vllm_engine import SPEC_METHODS, default_python, produce_vllm, speculative_config
from harness.samples.engines import openvino_engine as OV
from harness.samples.engines import mistralrs_engine as MRS

__all__ = ["add_arguments", "run"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--engine", choices=("ours", "hf", "openai", "vllm", "llama-cpp", "openvino", "mistralrs"),
                    required=True)
    ap.add_argument("--out", type=Path, required=True, help="sample file to write (appended to; resumable)")
    ap.add_argument("--n-prompts", type=int, default=32)
    ap.add_argument("--n-per-prompt", type=int, default=4, help="completions per prompt (>= 2 for the "
                                                                "independence checks)")
    ap.add_argument("--prompt-lengths", type=int, nargs=2, default=(8, 48), metavar=("MIN", "MAX"))
    ap.add_argument("--prompt-seed", type=int, default=0)
    ap.add_argument("--prompt-vocab", type=int, help="prompts of uniform token ids in [0, N) instead of the tiny pair's "
                                                     "byte prompts (the exact pair: 13, its letters)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0, help="0: off")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--min-p", type=float, default=0.0, help="openai, vllm (sent explicitly; 0: off)")
    ap.add_argument("--stop", action="append", default=[], help="openai only: a stop string (repeatable)")
    ap.add_argument("--no-eos", action="store_true", help="ours/hf: no end-of-sequence stop")
    ap.add_argument("--seed", type=int, default=0, help="sampler seed (ours/hf); base of request seeds (openai)")
    ap.add_argument("--method", choices=("speculative", "autoregressive"), default="speculative", help="ours")
    ap.add_argument("--hf-mode", choices=("plain", "assistant", "prompt_lookup"), default="assistant", help="hf")
    ap.add_argument("--k", type=int, default=4, help="draft tokens a round (ours, hf assistant, prompt lookup)")
    ap.add_argument("--control", help="ours/hf: an engine-level control of harness.samples.controls")
    ap.add_argument("--target", help="ours/hf/vllm/llama-cpp/openvino: target checkpoint, a folder or a shipped name (tiny, exact, "
                                     "exact-markov, ...: `python -m harness models`; default: the shipped tiny pair)")
    ap.add_argument("--draft", help="ours/hf/vllm/openvino: draft checkpoint, a folder or a shipped name (default: the shipped tiny "
                                    "pair)")
    ap.add_argument("--batch-size", type=int, default=64, help="ours/hf: requests per generate call")
    ap.add_argument("--url", help="openai: base URL, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="openai: the model name the server expects")
    ap.add_argument("--prompt-format", choices=("ids", "text"), default="ids", help="openai")
    ap.add_argument("--tokenizer", help="openai: tokenizer (a model folder or a shipped name) for text prompts / text-only "
                                        "responses")
    ap.add_argument("--eos-token-id", type=int, help="openai: the EOS id (default: the tokenizer's)")
    ap.add_argument("--request-seeds", action="store_true", help="openai: send a seed with every request")
    ap.add_argument("--ignore-eos", action="store_true", help="openai: send ignore_eos (vLLM, SGLang): whole "
                                                              "completions, as verify-samples --exact needs")
    ap.add_argument("--concurrency", type=int, default=4, help="openai: requests in flight")
    ap.add_argument("--retries", type=int, default=5, help="openai: retries per request (a connection refused, reset "
                                                           "or dropped mid-response, a timeout, HTTP 408/429/5xx)")
    ap.add_argument("--backoff", type=float, default=0.5, help="openai: first retry delay, seconds (doubles)")
    ap.add_argument("--timeout", type=float, default=120.0, help="openai: seconds per request")
    _add_vllm_arguments(ap)
    ap.add_argument("--no-progress", action="store_true")


def _add_vllm_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``--engine vllm`` (:mod:`harness.samples.engines.vllm_engine`)."""
    ap.add_argument("--vllm-python", help="vllm: the engine environment's Python (default $SPECVERIFY_VLLM_PYTHON or "
                                          ".venv-vllm/bin/python)")
    ap.add_argument("--spec", choices=tuple(dict.fromkeys(SPEC_METHODS + OV.SPECS)),
                    help="vllm: speculation (default draft: a draft model, probabilistic drafts); llama-cpp: none or "
                         "ngram (default: prompt lookup); openvino: none, draft or lookup (default draft)")
    ap.add_argument("--vllm-shim", choices=("fixed", "stock"), default="fixed",
                    help="vllm CPU: with the expand-kernel fix plugin (vllm#55005) or vLLM as shipped")
    ap.add_argument("--max-num-seqs", type=int, default=256, help="vllm: requests the engine batches (default 256)")
    ap.add_argument("--prefix-caching", choices=("on", "off"), default="off", help="vllm, openvino, mistralrs: prefix caching")
    ap.add_argument("--max-num-batched-tokens", type=int, default=32768,
                    help="vllm: tokens per scheduler step (default 32768: no prefill is chunked)")
    ap.add_argument("--seeding", choices=("all", "none", "mixed"), default="all",
                    help="vllm: seeded requests (mixed: every other one unseeded)")
    ap.add_argument("--greedy-share", type=float, default=0.0, help="vllm: share of greedy requests in the batch")
    ap.add_argument("--n", type=int, default=1, help="vllm: completions per request (SamplingParams.n)")
    ap.add_argument("--omit-temperature", action="store_true", help="vllm: leave temperature unset (vLLM's default)")
    ap.add_argument("--row-controls", help="vllm: a JSON list of per-request overrides (keys temperature, top_p, "
                                           "max_new_tokens) cycled over the requests: mixed controls in one batch")
    for pen in ("repetition", "presence", "frequency"):
        ap.add_argument(f"--{pen}-penalty", type=float, help=f"vllm: SamplingParams.{pen}_penalty (no field in the "
                                                              "sample format: recorded in x_penalties)")
    ap.add_argument("--max-model-len", type=int, help="vllm: the engine's max_model_len (default 512)")
    ap.add_argument("--gguf", help="llama-cpp: a GGUF file to run (default: --target exported to float32 GGUF)")
    ap.add_argument("--llama-workers", type=int, default=1, help="llama-cpp: engine processes (one thread each)")
    ap.add_argument("--openvino-python", help="openvino: the engine environment's Python (default "
                                              "$SPECVERIFY_OPENVINO_PYTHON or .venv-openvino/bin/python)")
    ap.add_argument("--kv-precision", choices=OV.KV_PRECISIONS, default="f32",
                    help="openvino: the CPU plugin's KV_CACHE_PRECISION (default f32; the plugin's own default is u8); "
                         "mistralrs: f32 or f16 (its CPU default is f16)")
    ap.add_argument("--openvino-chunk", type=int, default=4096, help="openvino: requests per generate call")
    ap.add_argument("--mistralrs-python", help="mistralrs: the engine environment's Python (default "
                                               "$SPECVERIFY_MISTRALRS_PYTHON or .venv-mistralrs/bin/python)")


def _check(args) -> None:
    for opt in ("n_prompts", "n_per_prompt", "max_new_tokens", "k", "batch_size", "concurrency"):
        v = getattr(args, opt)
        check_option(v >= 1, "--" + opt.replace("_", "-"), v, "an integer >= 1")
    lo, hi = args.prompt_lengths
    check_option(2 <= lo <= hi, "--prompt-lengths", [lo, hi], "MIN MAX with 2 <= MIN <= MAX")
    check_option(args.prompt_vocab is None or args.prompt_vocab >= 2, "--prompt-vocab", args.prompt_vocab, "an integer >= 2")
    check_option(args.temperature >= 0, "--temperature", args.temperature, "a number >= 0")
    check_option(args.top_k >= 0, "--top-k", args.top_k, "an integer >= 0 (0: off)")
    check_option(0 < args.top_p <= 1, "--top-p", args.top_p, "a number in (0, 1]")
    check_option(0 <= args.min_p < 1, "--min-p", args.min_p, "a number in [0, 1)")
    check_option(args.retries >= 0, "--retries", args.retries, "an integer >= 0")
    check_seed(args.seed)
    check_option(0 <= args.greedy_share <= 1, "--greedy-share", args.greedy_share, "a number in [0, 1]")
    check_option(args.n >= 1 and args.max_num_seqs >= 1, "--n / --max-num-seqs", [args.n, args.max_num_seqs],
                 "integers >= 1")
    check_out(args.out, is_file=True)
    check_waits(args.timeout, args.backoff)
    for opt in ("target", "draft", "tokenizer"):  # local models: a shipped short name or a folder (not --model: a server's name)
        if getattr(args, opt) is not None:
            setattr(args, opt, resolve_model(getattr(args, opt), "--" + opt))
    _check_vllm_rows(args)
    if args.engine != "openai":
        check_option(args.min_p == 0 or args.engine == "vllm", "--min-p", args.min_p,
                     "0 for --engine ours/hf/llama-cpp/openvino (no min_p)")
        check_option(not args.stop, "--stop", args.stop, "absent for --engine ours/hf (no stop strings)")
    else:
        check_option(bool(args.url), "--url", args.url, "the endpoint's base URL for --engine openai")
        check_option(bool(args.model), "--model", args.model, "the model name for --engine openai")
        check_endpoint(args.url, args.timeout, args.backoff)
        check_option(args.control is None, "--control", args.control, "absent for --engine openai")
    if args.control is not None:
        check_option(args.control in CONTROLS, "--control", args.control, f"one of {sorted(CONTROLS)}")
    check_count("--n-prompts", args.n_prompts, 400 + 8 * (hi + args.max_new_tokens),  # so that its own excess is named
                "requests at one completion per prompt, each holding its prompt and completion")
    check_count("--n-per-prompt", args.n_per_prompt, args.n_prompts * (400 + 8 * (hi + args.max_new_tokens)),
                f"each unit of it is --n-prompts = {args.n_prompts:,} requests, each holding its prompt and completion")
    _check_model_options(args)
    _check_engine_spec(args)


ROW_KEYS = {"temperature": (lambda v: isinstance(v, (int, float)) and v >= 0, "a number >= 0 (0: greedy)"),
            "top_p": (lambda v: isinstance(v, (int, float)) and 0 < v <= 1, "a number in (0, 1]"),
            "max_new_tokens": (lambda v: isinstance(v, int) and v >= 1, "an integer >= 1")}


def _check_vllm_rows(args) -> None:
    """--row-controls (parsed into a tuple of dicts), the penalties and --max-model-len: vllm only."""
    pens = {f"{p}_penalty": getattr(args, f"{p}_penalty") for p in ("repetition", "presence", "frequency")}
    args.penalties = {k: v for k, v in pens.items() if v is not None}
    vllm_only = {"--row-controls": args.row_controls, "--max-model-len": args.max_model_len,
                 **{"--" + k.replace("_", "-"): v for k, v in args.penalties.items()}}
    for opt, v in vllm_only.items():
        check_option(v is None or args.engine == "vllm", opt, v, "absent unless --engine vllm")
    check_option(args.max_model_len is None or args.max_model_len >= 2, "--max-model-len", args.max_model_len,
                 "an integer >= 2")
    check_option(args.penalties.get("repetition_penalty", 1.0) > 0, "--repetition-penalty",
                 args.penalties.get("repetition_penalty"), "a number > 0 (1: off)")
    rows = args.row_controls
    if rows is None:
        args.row_controls = ()
        return
    try:
        rows = json.loads(rows)
    except ValueError:
        rows = None
    check_option(isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows), "--row-controls",
                 args.row_controls, "a non-empty JSON list of objects")
    for r in rows:
        for k, v in r.items():
            check_option(k in ROW_KEYS, "--row-controls", r, f"objects with keys among {sorted(ROW_KEYS)}")
            check_option(ROW_KEYS[k][0](v), f"--row-controls {k}", v, ROW_KEYS[k][1])
    args.row_controls = tuple(rows)


def _row_controls(args) -> list:
    """The controls of each --row-controls entry (the one configuration without it)."""
    base = _controls(args)
    if not getattr(args, "row_controls", ()):
        return [base]
    out = []
    for r in args.row_controls:
        t = r.get("temperature", base.temperature)
        out.append(dataclasses.replace(base, temperature=t, top_p=r.get("top_p", base.top_p), greedy=t == 0,
                                       max_new_tokens=r.get("max_new_tokens", base.max_new_tokens)))
    return out


def _needs_draft(args) -> bool:
    """Whether the engine configuration runs a draft model (ours speculative, hf assistant, a control)."""
    if args.control is not None:
        return True
    return (args.engine == "ours" and args.method == "speculative") or (args.engine == "hf" and args.hf_mode == "assistant")


def _check_model_options(args) -> None:
    """--target / --draft: both or neither (the shipped tiny pair); --target alone only where no draft runs."""
    if args.engine not in ("ours", "hf"):
        check_option(args.draft is None or args.target is not None or args.engine != "vllm", "--draft", args.draft,
                     "given with --target (without both, the shipped tiny pair runs)")
        return
    check_option(args.draft is None or args.target is not None, "--draft", args.draft,
                 "given with --target (without both, the shipped tiny pair runs)")
    check_option(args.target is None or args.draft is not None or not _needs_draft(args), "--draft", args.draft,
                 "a draft checkpoint with --target for this engine configuration (--engine ours --method speculative, "
                 "--engine hf --hf-mode assistant, --control); --method autoregressive / --hf-mode plain / "
                 "prompt_lookup need none")


def _load_models(args):
    """(target, draft or None): the shipped tiny pair, or --target (and --draft); a checkpoint that cannot be
    read is exit 2 naming its option, before the sample file is opened."""
    if args.target is None:
        return load_tiny_pair()
    try:
        if args.draft is None:
            return HFModel.from_pretrained(args.target, local_files_only=True), None
        return load_pair(args.target, args.draft, local_files_only=True)
    except (OSError, ValueError) as e:
        opt = "--target" if args.draft is None else "--target / --draft"
        raise UsageError(f"`{opt}` must be {'a local model checkpoint' if args.draft is None else 'local model checkpoints'}; got {args.target!r}"
                         f"{'' if args.draft is None else f' / {args.draft!r}'}: {' '.join(str(e).split())[:300]}") from None


def _check_fits(args, target) -> None:
    """What the loaded target can hold: its positions (longest prompt + --max-new-tokens + --k) and its
    vocabulary (--prompt-vocab, or the byte prompts' ids up to 256)."""
    cfg = target.model.config
    mpe = next((v for v in (getattr(cfg, a, None) for a in ("max_position_embeddings", "n_positions"))
                if isinstance(v, int) and v > 0), None)
    hi = args.prompt_lengths[1]
    need = hi + args.max_new_tokens + args.k
    if mpe is not None and hi + 1 + args.k > mpe:  # not even one new token fits: the prompts are what is too long
        raise UsageError(f"`--prompt-lengths` must end at most {max(mpe - 1 - args.k, 0):,} for this target ({mpe:,} "
                         f"positions = prompts up to the second value + --max-new-tokens + --k {args.k}); "
                         f"got {list(args.prompt_lengths)}")
    if mpe is not None and need > mpe:
        raise UsageError(f"`--max-new-tokens` must be at most {max(mpe - hi - args.k, 0):,} for this target ({mpe:,} "
                         f"positions = prompts up to {hi} + --max-new-tokens + --k {args.k}); got {args.max_new_tokens!r}")
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 1)
    width = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 1)
    batch = min(args.batch_size, args.n_prompts * args.n_per_prompt)  # requests in one generate call
    check_count("--batch-size", batch, 4 * need * (2 * 2 * layers * width + 3 * target.vocab_size),
                f"sequences of one generate call, min(--batch-size, requests) = {batch:,}, of {need:,} positions "
                "each: KV caches of target and draft and rows of logits")
    V = target.vocab_size
    if args.prompt_vocab is not None:
        check_option(args.prompt_vocab <= V, "--prompt-vocab", args.prompt_vocab,
                     f"an integer in [2, {V}] (the target's vocabulary size)")
    else:
        check_option(V >= 257, "--prompt-vocab", None, f"given for a target of {V} tokens (the default byte prompts "
                     "use ids up to 256)")


def _controls(args):
    return Controls(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                    max_new_tokens=args.max_new_tokens, min_p=args.min_p, greedy=args.temperature == 0,
                    stop=tuple(args.stop))


def _check_resume(w: SampleWriter, controls, args, reqs) -> None:
    """A resumed file must be continued by the same configuration: the controls, the prompts of its request
    ids (--prompt-seed, --prompt-lengths, --prompt-vocab) and the engine (--engine, --method, --hf-mode,
    --k, --control); UsageError naming the differing option, before anything is written."""
    if not w.done:
        return
    held = read_samples(w.path, option="--out")
    first = held[0].controls
    where = f"`--out` {str(w.path)!r}"
    if first.law_key() not in {c.law_key() for c in _row_controls(args)}:
        raise UsageError(f"{where} holds completions drawn under {first.to_json()}; this run asks "
                         f"for {controls.to_json()} (one configuration per file: write to another file)")
    prompts = {r.request_id: r.prompt_ids for r in reqs}
    other = next((r for r in held if r.request_id in prompts and prompts[r.request_id] != r.prompt_ids), None)
    if other is not None:
        raise UsageError(f"{where} holds request {other.request_id!r} with another prompt than this run's: the file "
                         f"was drawn with another --prompt-seed (this run: {args.prompt_seed}), --prompt-lengths "
                         f"({' '.join(map(str, args.prompt_lengths))}) or --prompt-vocab ({args.prompt_vocab}); resume "
                         "with the file's options, or write to another file")
    want = _engine_identity(args)
    if want is None:
        return
    for r in held:
        for key, option in (("name", "--engine"), ("control", "--control"), ("speculative", _spec_option(args))):
            if r.engine.get(key) != want.get(key):
                raise UsageError(f"{where} holds request {r.request_id!r} drawn by engine {key} "
                                 f"{r.engine.get(key)!r}; this run's {option} gives {want.get(key)!r} (one engine "
                                 "configuration per file: resume with the file's options, or write to another file)")


def _spec_option(args) -> str:
    if args.control is not None:
        return "--control"
    return ("--method / --k" if args.engine == "ours" else "--hf-mode / --k")


def _engine_identity(args) -> Optional[dict]:
    """The ``engine`` fields an in-process run (ours, hf) writes: name, speculative method and k, control;
    None for the other engines (their records name the server or the engine build)."""
    if args.engine not in ("ours", "hf"):
        return None
    name = args.engine
    if args.control is not None:
        c = CONTROLS[args.control]
        spec = {"method": c.name}
        name = "hf" if c.engine == "transformers" else name
    elif args.engine == "ours":
        spec = {"method": "draft", "k": args.k} if args.method == "speculative" else None
    else:
        spec = None if args.hf_mode == "plain" else {"method": args.hf_mode, "k": args.k}
    return {"name": "transformers" if name == "hf" else "specimpl", "speculative": spec,
            **({"control": args.control} if args.control else {})}


def _in_process(args, reqs, w: SampleWriter, models) -> int:
    target, draft = models
    config = P.config_of(_controls(args)) if args.temperature > 0 else SamplingConfig(greedy=True)
    post = None
    if args.control is not None:
        c = CONTROLS[args.control]
        fn, post = c.fn, c.postprocess
    elif args.engine == "ours":
        fn = P.speculative_sampler if args.method == "speculative" else P.autoregressive_sampler
    else:
        fn = P.hf_sampler(args.hf_mode)
    eos = None if args.no_eos else target.model.config.eos_token_id
    engine = {**_engine_identity(args), "dtype": "float32"}
    engine = {k: engine[k] for k in ("name", "speculative", "dtype", "control") if k in engine}  # the file's order
    if engine["name"] == "transformers":
        import transformers
        engine["version"] = transformers.__version__
    return P.produce(reqs, fn, target, draft, config=config, max_new_tokens=args.max_new_tokens, eos_token_id=eos,
                     batch_size=args.batch_size, seed=args.seed, writer=w, engine=engine, k=args.k,
                     progress=not args.no_progress, postprocess=post)


def _vllm(args, reqs, w: SampleWriter) -> int:
    target = args.target or str(model_path("tiny"))
    draft = args.draft or (str(model_path("tiny-draft")) if not args.target else None)
    engine_args = {"max_num_seqs": args.max_num_seqs, "enable_prefix_caching": args.prefix_caching == "on",
                   "max_num_batched_tokens": args.max_num_batched_tokens}
    if args.max_model_len is not None:
        engine_args["max_model_len"] = args.max_model_len
    return produce_vllm(reqs, w, python=args.vllm_python or default_python(), shim=args.vllm_shim,
                        progress=not args.no_progress, target=target,
                        spec=speculative_config(args.spec or "draft", args.k, draft), controls=_controls(args), seed=args.seed,
                        seeding=args.seeding, greedy_share=args.greedy_share, n=args.n,
                        omit_temperature=args.omit_temperature, engine_args=engine_args,
                        row_controls=args.row_controls, penalties=args.penalties)


def _check_engine_spec(args) -> None:
    """--spec and the options of the engine that reads it (vllm, openvino), before any work."""
    if args.engine == "vllm":
        check_option(args.spec is None or args.spec in SPEC_METHODS, "--spec", args.spec,
                     f"one of {SPEC_METHODS} for --engine vllm")
    if args.engine == "mistralrs":
        _check_mistralrs(args)
    if args.engine != "openvino":
        return
    args.spec = args.spec or "draft"
    check_option(args.spec in OV.SPECS, "--spec", args.spec, f"one of {OV.SPECS} for --engine openvino")
    check_option(args.openvino_chunk >= 1, "--openvino-chunk", args.openvino_chunk, "an integer >= 1")
    check_option(args.target is not None, "--target", args.target, "a checkpoint (a folder or a shipped name) for "
                 "--engine openvino")
    check_option(args.spec != "draft" or args.draft is not None, "--draft", args.draft,
                 "a draft checkpoint for --engine openvino --spec draft")
    args.openvino_python = args.openvino_python or OV.default_python()
    check_option(Path(args.openvino_python).exists(), "--openvino-python", args.openvino_python,
                 "the Python of an environment with openvino-genai and optimum-intel (make openvino-venv)")


def _check_mistralrs(args) -> None:
    """The options of ``--engine mistralrs`` (plain decoding: its speculative path needs PagedAttention, not on CPU)."""
    check_option(args.spec in (None, "none"), "--spec", args.spec, "none for --engine mistralrs (mistral.rs 0.9.5 "
                 "speculates only with an MTP assistant, which needs PagedAttention: not available on CPU)")
    check_option(args.target is not None, "--target", args.target, "a checkpoint (a folder or a shipped name) for "
                 "--engine mistralrs")
    check_option(args.kv_precision in MRS.KV_PRECISIONS, "--kv-precision", args.kv_precision,
                 f"one of {MRS.KV_PRECISIONS} for --engine mistralrs")
    args.mistralrs_python = args.mistralrs_python or MRS.default_python()
    check_option(Path(args.mistralrs_python).exists(), "--mistralrs-python", args.mistralrs_python,
                 "the Python of an environment with mistralrs (make mistralrs-venv)")


def _mistralrs(args, reqs, w: SampleWriter) -> int:
    """mistral.rs in its own environment (:mod:`harness.samples.engines.mistralrs_engine`)."""
    return MRS.produce_mistralrs(reqs, w, python=args.mistralrs_python, target=args.target, controls=_controls(args),
                                 progress=not args.no_progress, kv=args.kv_precision,
                                 prefix_caching=args.prefix_caching == "on")


def _openvino(args, reqs, w: SampleWriter) -> int:
    """OpenVINO GenAI in its own environment (:mod:`harness.samples.engines.openvino_engine`)."""
    return OV.produce_openvino(reqs, w, python=args.openvino_python, target=args.target,
                               draft=args.draft, spec=args.spec, progress=not args.no_progress, k=args.k,
                               controls=_controls(args), seed=args.seed, prefix_caching=args.prefix_caching == "on",
                               max_num_seqs=args.max_num_seqs, kv_precision=args.kv_precision,
                               chunk=args.openvino_chunk)


def _llama(args, reqs, w: SampleWriter) -> int:
    args.spec = args.spec or "ngram"
    check_option(args.spec in LLAMA_SPECS, "--spec", args.spec, f"one of {LLAMA_SPECS} for --engine llama-cpp "
                 "(ngram: llama-cpp-python's prompt-lookup drafts)")
    check_option(1 <= args.llama_workers <= 64, "--llama-workers", args.llama_workers, "an integer in [1, 64]")
    return produce_llama(reqs, w, controls=_controls(args), seed=args.seed, spec=args.spec, k=args.k,
                         workers=args.llama_workers, target=args.target, gguf=args.gguf, progress=not args.no_progress)


def _openai(args, reqs, w: SampleWriter) -> int:
    tok = None
    if args.tokenizer:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    eos = args.eos_token_id if args.eos_token_id is not None else getattr(tok, "eos_token_id", None)
    if args.prompt_format == "text" and tok is None:
        raise UsageError("`--prompt-format text` needs `--tokenizer` (to decode the prompt ids); got none")
    spec = EndpointSpec(url=args.url, model=args.model, controls=_controls(args), prompt_format=args.prompt_format,
                        tokenizer=tok, eos_token_id=eos, seed=args.seed if args.request_seeds else None,
                        concurrency=args.concurrency, retries=args.retries, backoff=args.backoff,
                        timeout=args.timeout, ignore_eos=args.ignore_eos)
    return produce_openai(reqs, spec, w, progress=not args.no_progress)


def run(args) -> int:
    _check(args)
    reqs = make_requests(args.n_prompts, args.n_per_prompt, tuple(args.prompt_lengths), args.prompt_seed,
                         args.prompt_vocab)
    models = None
    if args.engine in ("ours", "hf"):
        models = _load_models(args)
        _check_fits(args, models[0])
    with SampleWriter(args.out) as w:
        _check_resume(w, _controls(args), args, reqs)
        before = len(w.done)
        producers = {"openai": _openai, "vllm": _vllm, "llama-cpp": _llama, "openvino": _openvino, "mistralrs": _mistralrs}
        try:
            n = (producers[args.engine](args, reqs, w) if args.engine in producers
                 else _in_process(args, reqs, w, models))
        except (SamplerError, UsageError):
            raise
        except (OSError, ValueError) as e:
            raise SamplerError(f"the engine failed: {type(e).__name__}: {e}") from e
    print(f"{args.out}: {n} new completions written ({before} already there); {before + n} of {len(reqs)} requests",
          file=sys.stderr)
    return 0
