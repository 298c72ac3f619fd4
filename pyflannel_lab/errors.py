"""The lab's one error type: its message is what the command line prints."""

from pyflannel_runtime import PyflannelError


class LabError(PyflannelError):
    pass
