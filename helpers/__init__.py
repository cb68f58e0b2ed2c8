"""Plumbing for the course's notebooks; importing it first turns TensorFlow's C++ logs down."""

from helpers import logs as _logs

_logs.quiet_native_logs()

__version__ = "0.2.0"  # pyproject.toml's version; each install cell looks for it here
#: pyproject.toml's distribution: install cells find this line to tell ours from other ``helpers``
DISTRIBUTION = "fast-tf-course-helpers"
