"""A collection in a folder: its questions and embeddings in SQLite, searched through a FAISS index cached beside them."""
