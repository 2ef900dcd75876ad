"""Test doubles that ship with the package: tests, benchmarks and the GPU proof use them.

`tiny_model.py` writes a tiny random-weight model directory (`python -m
realtime.testing.tiny_model DIR`); `fake_exllamav2.py` stands in for the exllamav2
package where there is no GPU (the GPU proof's dry run, the engine's tests).
"""
