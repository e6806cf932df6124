"""The test suite's own support: harnesses that start servers and clusters for the tests, never part of dupq.

``serving`` runs the service in a thread or as ``dupq serve`` in a subprocess and talks to it over
a real socket; ``ray_cluster`` starts a Ray head node on the loopback address. Tests import them
as ``support.serving`` and ``support.ray_cluster`` (tests/ is on the path through its conftest).
"""
