"""Experiments whose rows stay in docs/experiments: calibration, the help desks' thresholds, pair words."""
