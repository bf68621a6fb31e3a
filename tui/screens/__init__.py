"""One module per screen; every screen reads the app's model and services."""
