"""The lab's one error type: its message is what the command line prints."""


class LabError(Exception):
    pass
