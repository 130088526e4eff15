"""vendor."""
