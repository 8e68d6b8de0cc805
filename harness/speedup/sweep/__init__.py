"""``python -m harness sweep``: speedup as a function of alpha, c and k.

    cli         the command: options, cells, resume, the report
    suites      what a cell is, each suite's typed settings, how one cell is computed
    algorithms  the ``algorithms`` suite: chain, block and tree verification side by side
    tables      measured rows, predictions, fidelity and profiles, from stored cells alone
"""
