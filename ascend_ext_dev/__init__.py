"""ascend_ext's development tools, never on the engine's production path: the tiny vLLM-CPU
engine and model, ``make demo``, the CPU devserver behind the memory API and its turns.

Imported by bench/, tests/ and the demo targets only (tests/test_import_rules.py: no other
package imports it)."""
