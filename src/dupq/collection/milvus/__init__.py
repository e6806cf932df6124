"""A collection in Milvus: milvus-lite in a local file, or a Milvus server (pymilvus, an extra)."""
