"""Maintainer tools: clean, check and run the course's notebooks (not shipped to learners)."""
