"""Timing the library: encoding, search, training steps, the CLI's cold start, `dupq dedup` at scale."""
