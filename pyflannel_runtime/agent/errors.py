"""Errors that end pyflanneld's startup."""


class StartupError(Exception):
    """A startup step failed; flanneld logs the message and exits 1."""
