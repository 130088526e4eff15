"""Tests of mirror.airgap, one file per module."""
