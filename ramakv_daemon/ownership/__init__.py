"""A shared store's ownership protocol: takeovers, what a fenced commit says is stale."""
