"""Built-in pipeline policies; importing this package registers them in ``POLICIES``."""
from trident.autoscaler.policies import baseline  # noqa: F401
from trident.autoscaler.policies import trident  # noqa: F401
