"""Monitoring: drift and performance jobs, exporters, dashboards (built in later issues)."""
