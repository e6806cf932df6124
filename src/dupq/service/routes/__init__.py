"""The API's routes, one router per area (as FastAPI's project template lays out ``api/routes/``).

``similarity`` judges a pair, ``search`` searches, ``questions`` writes (behind the token), ``stored`` reads stored
questions and decisions back, ``queue`` is the review queue, ``health`` says the server is up, ``page`` is the
moderators' web page; :func:`~dupq.service.app.create_app` includes them.
"""

__all__ = ["health", "page", "queue", "questions", "search", "similarity", "stored"]
