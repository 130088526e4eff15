"""transferset."""
