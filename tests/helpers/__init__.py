"""Test helpers, one concern a module; tests/conftest.py re-exports them."""
