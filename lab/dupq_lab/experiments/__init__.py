"""Experiments whose rows stay in docs/experiments: the yardsticks' scripts (quora-dev, retrieval, out-of-domain, clean-pairs), the sweep, the static branch, calibration, pair words."""
