import sys

from harness.core.owner import needs_owner, owned_main

if needs_owner(sys.argv[1:]):  # before the heavy imports: this parent only owns the exit status (harness.core.owner)
    raise SystemExit(owned_main(sys.argv[1:]))

from harness.cli import main  # noqa: E402

raise SystemExit(main())
