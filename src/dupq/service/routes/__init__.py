"""The API's routes, one router per area (as FastAPI's project template lays out ``api/routes/``).

``similarity`` judges a pair, ``search`` finds the stored questions nearest a new one,
``questions`` adds, updates, removes and decides on stored questions (behind the token), ``stored``
reads them back (one by key, a page at a time, the decisions),
``queue`` lists the questions waiting for a moderator and the past decisions (and undoes one),
``health`` says the server is up and counts what it served, ``page`` is the moderators' web page.
:func:`~dupq.service.app.create_app` includes them, with the token check on reads when they are
protected.
"""

__all__ = ["health", "page", "queue", "questions", "search", "similarity", "stored"]
