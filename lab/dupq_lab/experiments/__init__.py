"""Experiments behind the docs' quality figures: the yardsticks' scripts (retrieval, out-of-domain), the tiers, the help desks' verdict and calibration, the reranker."""
