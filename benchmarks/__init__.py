"""Benchmarks: what hooks cost, what the notebooks cost.

    python3 dev.py bench            the full run (a few minutes); writes benchmarks/RESULTS.md
    python3 dev.py bench --quick    a short run that proves the command works; writes
                                    benchmarks/out/results-quick.md (git-ignored)

Everything is measured in one process (the notebooks each in a fresh kernel, the memory test in
a fresh interpreter), interleaved so that the machine's noise hits every variant alike.
"""
