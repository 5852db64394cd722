"""ram-a-kv package."""

from ascend_ext.installer import install  # noqa: F401
