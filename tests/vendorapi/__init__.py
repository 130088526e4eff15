"""Tests of mirror.vendorapi."""
