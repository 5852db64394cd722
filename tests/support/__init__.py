"""Test support shared by several suites (import as ``support.*`` with tests/ on sys.path)."""
