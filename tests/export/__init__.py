"""Tests of mirror.export."""
