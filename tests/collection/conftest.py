"""The collection tests' fixtures; their plain helpers are in collkit.py beside this file."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def bundled():
    from dupq.modeling.model import Model

    return Model.load()
