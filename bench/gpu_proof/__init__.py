"""The GPU proof of the exllamav2 engine: `scripts/gpu-proof [--dry-run] [--model DIR] [--out DIR]`.

What it proves, in one command that fits a lent GPU machine's 10-minute call:
the exllamav2 engine serves a real model behind `realtime serve`, over the SSE
path, the socket and the `openai` SDK, about as fast as exllamav2 runs without
us, with page reuse, cache_salt isolation, speculative warm-ups and cancellation
working. It writes `gpu-proof.json` and `gpu-proof.md` (a table) into `--out`:

* decode tokens/s of one stream through the server (each transport) against a
  bare `ExLlamaV2DynamicGenerator` loop on the same model and settings, in the
  driver's own process (the shape of what TabbyAPI runs);
* time to first token, cold and warm, with `cached_tokens` on the second turn,
  and again when the first turn asked for a speculative warm-up;
* cache_salt: the same prompt's reuse under its own salt and under another;
* cancel: engine steps between the server reading the client's close (or
  `response.cancel`) and the engine dropping the job, from an in-process server
  with the same engine (the moments are inside the server);
* aggregate tokens/s of 1, 8 and 32 concurrent streams, server and bare.

Without `--model` it builds a small random-weight Llama (`realtime.testing.tiny_model`,
512 wide, 8 layers, head dim 128, FP16 safetensors, which exllamav2 0.3.2 loads as
it is: `ExLlamaV2Linear` takes a plain `.weight` as an FP16 layer, so no EXL2
conversion is needed). `--dry-run` runs the same driver on a CPU machine against
`realtime.testing.fake_exllamav2` (served by `fake_serve`, the CLI with the fake
installed) and marks the report as a dry run: its numbers say nothing about a GPU.

Modules: `cli` (phases, time budget, report), `wheels` (carried wheels), `bare`
(the baseline), `served` (the server's measurements), `cancel`, `fake_serve`,
`report`.
"""
