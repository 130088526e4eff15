"""Tests of mirror.airgap.chart, one file per module."""
