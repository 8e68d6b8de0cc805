"""Minimal reproductions of two vLLM 0.32.0 CPU crashes the probes found (run with the engine's Python).

    .venv-vllm/bin/python experiments/vllm_crash_repro.py top_k            # crashes
    .venv-vllm/bin/python experiments/vllm_crash_repro.py top_k_temperature  # the same with temperature=1.0 set
    .venv-vllm/bin/python experiments/vllm_crash_repro.py chunked_seeded   # crashes
    .venv-vllm/bin/python experiments/vllm_crash_repro.py chunked_unseeded # runs

Both use the shipped exact Markov pair (specimpl/assets/exact_pair), float32, eager mode, token-id prompts.

top_k: speculative decoding (a draft model, 4 tokens a step) and ``SamplingParams(top_k=5)`` with the temperature
    left unset.  The engine core dies at the first speculative step:
    ``RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0``.
chunked_seeded: no speculation; ``max_num_batched_tokens = 64`` (with ``max_model_len = 64``) so a step cannot
    hold every prompt's prefill and one is chunked; requests carry a ``seed``.  A chunked prefill discards its
    step's sampled token and rewinds the request's generator with ``set_offset``, which a CPU generator refuses:
    ``RuntimeError: CPU Generator does not use offset``.  Without seeds (``chunked_unseeded``) the same run works.

Exit status: 0 the requests completed, 1 the engine raised (its first error line printed).
"""
import sys
from pathlib import Path

PAIR = Path(__file__).resolve().parents[1] / "specimpl" / "assets" / "exact_pair"
CASES = ("top_k", "top_k_temperature", "chunked_seeded", "chunked_unseeded")


def main(case: str) -> int:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    args = dict(model=str(PAIR / "markov_target"), dtype="float32", enforce_eager=True, seed=0,
                kv_cache_memory_bytes=1 << 28, max_model_len=512)
    if case.startswith("top_k"):
        args["speculative_config"] = {"method": "draft_model", "model": str(PAIR / "markov_draft"),
                                      "num_speculative_tokens": 4, "draft_sample_method": "probabilistic"}
        kw = {"top_k": 5, **({"temperature": 1.0} if case == "top_k_temperature" else {})}
        params = [SamplingParams(max_tokens=8, ignore_eos=True, seed=i, **kw) for i in range(4)]
    else:
        args.update(max_num_batched_tokens=64, max_model_len=64)
        params = [SamplingParams(max_tokens=8, ignore_eos=True, seed=i if case == "chunked_seeded" else None)
                  for i in range(4)]
    prompts = [TokensPrompt(prompt_token_ids=[(3 * i + j) % 13 for j in range(40)]) for i in range(4)]
    try:
        out = LLM(**args).generate(prompts, params, use_tqdm=False)
    except Exception as e:  # the engine core's death reaches the client as an EngineDeadError; its cause is printed
        print(f"{case}: engine raised {type(e).__name__}: {e}".splitlines()[0][:300])
        return 1
    print(f"{case}: ok, {sum(len(o.outputs[0].token_ids) for o in out)} tokens")
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process on CPU: the guard is required
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: vllm_crash_repro.py {{{'|'.join(CASES)}}}", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1]))
