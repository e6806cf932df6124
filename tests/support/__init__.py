"""The test suite's own support, never part of dupq: harnesses, fixtures' makers and shared checks.

``errors`` checks the one-sentence promise (:func:`support.errors.refused`); ``serving`` runs the service in
a thread or as ``dupq serve`` in a subprocess and talks to it over a real socket; ``ray_cluster`` starts a
Ray head node on the loopback address; ``servicekit`` builds the service tests' collections; ``synthetic``
writes pairs in the Quora format; ``cli_model`` trains the CLI tests' model; ``train_cli`` and
``torch_free`` serve the CLI's tests. Every test folder imports them as ``support.NAME``, the lab's tests
(lab/tests) too: pytest puts tests/ on the path (``pythonpath`` in pyproject.toml).
"""
