"""Test doubles that ship with the package: tests and the GPU proof's dry run use them."""
