"""Grouping a corpus into groups of duplicate questions: candidates found, judged and grouped, in memory, streamed on
this machine, or on a Ray cluster."""
