"""Namespaces, deployments and a shared store's ownership."""
