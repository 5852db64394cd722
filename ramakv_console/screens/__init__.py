"""Console screens, one per module."""
