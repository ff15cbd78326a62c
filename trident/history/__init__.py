"""What trident learned of each operator, kept across runs (:mod:`.store`), keyed by what the
operator is (:mod:`.fingerprint`), read from a run's records (:mod:`.lessons`) and believed by
the next run as far as its own measurements agree (:mod:`trident.core.model.prior`)."""
