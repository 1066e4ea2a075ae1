"""The ``deniable`` command line."""
