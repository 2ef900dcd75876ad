"""`python -m bench.gpu_proof`: see `bench.gpu_proof.cli` (run it through scripts/gpu-proof)."""

from bench.gpu_proof.cli import main

raise SystemExit(main())
