"""Dynamo's frontend with its echo engine, the peer of `bench.front_ends`.

Run by Dynamo's own interpreter (`python bench/dynamo_echo.py MODEL_DIR PORT`), never
imported by the benchmark: ai-dynamo lives in a virtual environment of its own.
Install it there with `pip install ai-dynamo-runtime==1.6.1` and
`pip install --no-deps ai-dynamo==1.6.1` (ai-dynamo's `aisimulate` dependency is not
needed for the echo engine). Its echo engine streams the last user message back one
character per chunk; `DYN_TOKEN_ECHO_DELAY_MS=0` (set by the benchmark) removes its
default 10 ms between chunks. The frontend is Dynamo's Rust HTTP server, the same one
`python -m dynamo.frontend` runs; discovery is in memory, so no etcd or NATS is needed.
"""

import asyncio
import sys
import urllib.request

import uvloop
from dynamo.llm import EngineType, EntrypointArgs, make_engine, run_input
from dynamo.runtime import DistributedRuntime


async def _announce(port: int) -> None:
    """Print the line `bench.procs.start_server` waits for, once the server answers."""
    url = f"http://127.0.0.1:{port}/v1/models"
    for _ in range(600):
        try:
            await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=1).read())
        except OSError:
            await asyncio.sleep(0.05)
            continue
        print(f"serving on http://127.0.0.1:{port}/", flush=True)
        return


async def main(model_dir: str, port: int) -> None:
    runtime = DistributedRuntime(asyncio.get_running_loop(), "mem", "tcp")
    args = EntrypointArgs(
        EngineType.Echo,
        model_path=model_dir,
        model_name="echo",
        http_host="127.0.0.1",
        http_port=port,
    )
    engine = await make_engine(runtime, args)
    announce = asyncio.create_task(_announce(port))
    await run_input(runtime, "http", engine)
    announce.cancel()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], int(sys.argv[2])))
