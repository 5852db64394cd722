"""Namespaces: an event's namespace resolved, and each one's manager, context and dispatcher."""
