"""dupq's lab: what measures the product (speed, sweeps, experiments, peers) and renders its figures.

The lab may import :mod:`dupq`; :mod:`dupq` never imports the lab (``lint-imports`` holds both).
"""
