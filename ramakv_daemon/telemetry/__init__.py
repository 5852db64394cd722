"""Prometheus metrics, gauges and log helpers."""
