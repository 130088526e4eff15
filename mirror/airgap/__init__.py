"""airgap."""
