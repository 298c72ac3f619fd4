"""Test doubles for services that cannot run on the test machine (used only by tests)."""
