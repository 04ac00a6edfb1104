"""The flags: defined, checked and explained, and how a script runs."""
