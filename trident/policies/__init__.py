"""Built-in pipeline policies; importing this package registers them in ``POLICIES``."""
from trident.policies import baseline  # noqa: F401
from trident.policies import trident  # noqa: F401
