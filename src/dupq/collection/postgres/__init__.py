"""A collection kept in PostgreSQL with the pgvector extension (``postgresql://USER@HOST:PORT/DB?table=NAME``)."""
