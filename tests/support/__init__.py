"""Test support shared by every suite (importable as ``support.*``: pyproject puts tests/ on
the path for pytest; tests/README.md lists the fixtures)."""
