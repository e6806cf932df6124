"""The test suite's own support, never part of dupq: harnesses, fixtures' makers and shared checks.

Every test folder, and lab/tests, imports its modules as ``support.NAME`` (``pythonpath`` in pyproject.toml puts
tests/ on the path); each module's docstring says what it holds.
"""
