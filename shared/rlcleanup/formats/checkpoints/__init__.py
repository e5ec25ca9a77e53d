"""Checkpoint and export formats: one interface (base.py), one registry (registry.py), one module per format.

Formats read a directory's listing and headers through the storage port and report problems in the vocabulary;
run-level policy (step agreement with the run, the marker, metric coverage, resume rules) is steps/validate.py's.
"""
