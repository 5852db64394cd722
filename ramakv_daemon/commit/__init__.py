"""The group commit and the start-up restore of committed state."""
