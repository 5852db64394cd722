"""Namespaces (one manager, handler context, dispatcher and budget each) and a shared
store's ownership."""
