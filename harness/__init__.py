"""Statistics, verification, profiling, sweeps, reports and the command line."""
