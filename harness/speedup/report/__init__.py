"""``python -m harness report``: figures and tables of a sweep, drawn from its stored results only.

    cli         the command and the main sweep figures / tables
    algorithms  the ``algorithms`` suite's figures       membound  the memory-bound pair's figure and table
    roofline    the roofline speedup model's figures (from roofline.csv)
"""
