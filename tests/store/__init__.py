"""Tests of mirror.store."""
