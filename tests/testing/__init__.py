"""The engine conformance kit (realtime/testing) and the test doubles shipped with the package."""
