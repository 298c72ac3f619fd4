"""Errors that end pyflanneld's startup."""

from pyflannel_runtime import PyflannelError


class StartupError(PyflannelError):
    """A startup step failed; flanneld logs the message and exits 1."""
