"""The controller: a pure control loop and the Ray actor shell around it."""
