"""The pipeline autoscaler: its face, the shim inside Ray Data, the controller, policies, actuation rules and its fluid simulator."""
