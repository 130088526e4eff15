"""Tests of mirror.vendor."""
