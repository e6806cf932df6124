"""The fault tests (``pytest -m faults``): one test per class of fault a hostile tester found.

Each runs the installed package as a user does (``dupq`` in a subprocess, ``dupq serve`` on a
port) on the bundled model and synthetic questions, in its own temporary folder; its helpers are
``faultkit.py``. ``test_mutations.py`` shows, for the tests that could hide a fault, that each
fails on the fault it names. A fault test that tests a module's own promise lives beside that
module's tests, marked ``faults`` too (``test_collection.py``'s kill -9 during an add).
"""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """What a test encodes in this process, it encodes on one thread, as its `dupq` subprocesses do."""
