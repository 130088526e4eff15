"""mirror: carry a documentation vendor's static-export bundles into air-gapped clusters."""

__version__ = "0.1.0"
