"""Plumbing shared by every command, with no statistics and no models.

    config       where the shipped settings files live (harness/configs/), TOML reading and overlays, seeds
    schema       typed keys of the settings files         options     checks of the shared command-line options
    errors       the exit-code contract (0 ok, 1 lossy, 2 bad input, 3 sampler/model failed)
    provenance   config, seed, commit, versions and machine of a result; atomic writes
    atomic       whole reports or none (staged folders)   fingerprint  content keys of saved state
    backends     where tasks run (this process, a pool, Ray) and thread limits   forkmap  forked in-memory maps
    threads      with_threads                             figures      one matplotlib set-up and figure writer
    models       the shipped models' short names (tiny, exact, exact-markov, ...) -> their folders in the install
    owner        a thin parent that owns the exit status of a command running a plug-in sampler
    lifeline     workers (and an owned command) die with their parent
    cputime      CPU seconds of a task, and of this process with its children (the cost of a verification)

May import: nothing else of ``harness`` (``specimpl.errors`` for argument checks).
"""
