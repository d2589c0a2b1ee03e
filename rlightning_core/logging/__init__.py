"""Metric loggers and the fan-out of metrics to every configured logger."""
