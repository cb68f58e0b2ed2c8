"""Plumbing for the Fast TensorFlow Training notebooks (docs/maintainers.md's "Layout" says which
module serves which notebook). Importing it first turns TensorFlow's C++ log chatter down."""

from helpers import logs as _logs

_logs.quiet_native_logs()

__version__ = "0.1.0"
#: The distribution this package comes in (pyproject.toml). Each notebook's install cell looks
#: for its start in this file, to tell the course's ``helpers`` from another module of the name.
DISTRIBUTION = "fast-tf-course-helpers"
