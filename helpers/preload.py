"""The fork server's first preload (processes.PRELOAD): TensorFlow, as quietly as a kernel's."""
import contextlib

from helpers.logs import import_tensorflow

with contextlib.suppress(ImportError):  # not installed here: nothing to import once
    import_tensorflow()
