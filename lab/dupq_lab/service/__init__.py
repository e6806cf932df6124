"""Timing the service: `dupq serve` under load, side by side with an earlier revision, re-encoding while serving."""
