"""The fluid pipeline simulator: the autoscaler's policies on a simulated clock, actuated as the shim does."""
