"""Console widgets, one per module."""
