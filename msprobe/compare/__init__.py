"""Compare stage: NPU vs GPU details CSVs -> per-API verdicts and a report."""
