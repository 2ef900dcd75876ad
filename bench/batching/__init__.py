"""`python -m bench.batching`: concurrent requests on the CPU engine, side by side with vLLM.

See `scenario.py` for what is measured and `install_vllm.sh` for vLLM's own venv.
"""
