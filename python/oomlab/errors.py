"""errors.py -- the exceptions oomlab's Python API raises, with the CLI's messages (the C++
core's error line, `oomlab: error: ...` without the prefix). Each is also the matching
built-in exception, so `except ValueError` still catches a bad argument.
"""
import re


class OomlabError(Exception):
    """Every error of oomlab's API."""


class InputError(OomlabError, ValueError):
    """A bad argument, a missing or corrupt file, an impossible batch (the CLI's exit 2)."""


class UnsupportedOpsError(OomlabError, NotImplementedError):
    """The model uses ops or features oomlab lacks. `ops` lists each missing op with the node and
    module it comes from ("aten.lstm.input (node 'lstm', module 'rnn' (LSTM))"), `modules` the
    module paths named; both are empty when the message is about a feature, not ops."""

    def __init__(self, message):
        super().__init__(message)
        self.ops = [m.group(0) for m in re.finditer(r"[\w.]+ \(node '[^']*'(?:, module '[^']*' \([^)]*\))?\)", message)]
        self.modules = sorted({m.group(1) for m in re.finditer(r"module '([^']*)'", message)})


class OutOfMemoryError(OomlabError, MemoryError):
    """The host ran out of memory, or a requested device capacity cannot hold the run."""


class InternalError(OomlabError, RuntimeError):
    """A bug in oomlab: please report it with the call that raised it."""


KINDS = {"input": InputError, "unsupported": UnsupportedOpsError, "oom": OutOfMemoryError, "internal": InternalError}
