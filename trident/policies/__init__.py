"""Built-in pipeline policies; importing this package registers them in ``POLICIES``."""
