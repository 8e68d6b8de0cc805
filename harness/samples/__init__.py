"""Is my engine lossless?  Engine samples: the sample file format, its producers and ``verify-samples``.

    harness/samples/format.py       the file format (versioned JSONL), strict reader, append-only writer
    harness/samples/producers.py    in-process producers: our samplers, transformers' generate
    harness/samples/openai.py       the OpenAI-compatible completions client (bounded concurrency, retries)
    harness/samples/openai_stub.py  a tiny OpenAI-compatible server on 127.0.0.1 (tests, controls)
    harness/samples/sample_cli.py   ``python -m harness sample``
    harness/samples/scoring.py      scored mode: the target scores every output token
    harness/samples/plan.py         the tests of both modes and of independence (one Holm family)
    harness/samples/certificate.py  the three-valued verdict and the completions needed to certify
    harness/samples/dependence.py   the dependence stage: copied completions, pairs sharing a stream (every mode)
    harness/samples/verify_cli.py   ``python -m harness verify-samples``
    harness/samples/report.py       its report: tests.csv, summary.md, meta.json
    harness/samples/controls.py     engine-level bug controls and lossless controls
    harness/samples/engines/        real engines: GGUF export, llama.cpp producers

May import: verify's plan and row types (:mod:`harness.verify.battery`, :mod:`harness.verify.family`),
:mod:`harness.controls`, :mod:`harness.laws`, :mod:`harness.stats`, :mod:`harness.core`; never :mod:`harness.speedup`.
"""
