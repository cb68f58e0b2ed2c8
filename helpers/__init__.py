"""Plumbing for the course's notebooks; importing it first turns TensorFlow's C++ logs down."""

from importlib import metadata

from helpers import logs as _logs

_logs.quiet_native_logs()

#: pyproject.toml's name: install cells find it here, and read the version from its metadata
DISTRIBUTION = "fast-tf-course-helpers"
__version__ = next((d.version for d in metadata.distributions(name=DISTRIBUTION)), "0+uninstalled")
