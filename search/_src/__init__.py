"""Implementation of the layout search (private; use the ``search`` package)."""
