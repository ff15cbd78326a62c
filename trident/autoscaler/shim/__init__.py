"""The shim inside Ray Data's streaming executor: an execution callback that observes every
operator, talks to the run's controller and actuates pools, caps and rolling updates.
Everything here touches Ray Data internals; see ``compat.py`` for the version gate."""
