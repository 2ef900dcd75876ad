"""`python -m bench.engine_transport`: the engine process's transport candidates, side by side.

The engine core sends one message per step (the outputs of every sequence of the
batch) and the front end reads it on its event loop. This measures, for each
candidate, what that costs: a child process (the "engine") sends STEPS batches of
BATCH outputs as fast as the reader takes them, and a parent on uvloop reads and
decodes them; then a ping-pong of small messages gives the round trip (a request
in, its first output back). CPU time is counted in both processes.

Candidates: a Unix stream socket with length-prefixed frames (pickle, msgpack),
multiprocessing's `Pipe` (pickle, its own framing), and ZMQ PUSH/PULL over ipc with
msgpack (vLLM's choice). The optional ones run when pyzmq and msgpack are
installed. Shared memory was not built: a step's message is about 1 KB, so the copy
is not the cost; the wake-up of the other process is, and a shared-memory ring
still needs a file descriptor (eventfd or a pipe) to sleep on when idle.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pickle
import resource
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

STEPS = 20_000
BATCH = 16
PINGS = 3_000
_HEADER = struct.Struct("!I")


def _batch(step: int) -> list[tuple[int, list[int], None, int | None]]:
    return [(job, [step % 32000], None, None) for job in range(BATCH)]


def _codec(name: str) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    if name == "msgpack":
        import msgpack

        return msgpack.packb, msgpack.unpackb
    return (lambda value: pickle.dumps(value, protocol=5)), pickle.loads


# --- the child ("engine") side ---


def _child_stream(sock: socket.socket, codec: str, mode: str) -> None:
    encode, decode = _codec(codec)
    if mode == "ping":
        buffer = b""
        for _ in range(PINGS):
            while len(buffer) < 4 or len(buffer) < 4 + _HEADER.unpack_from(buffer)[0]:
                buffer += sock.recv(65536)
            size = _HEADER.unpack_from(buffer)[0]
            message = decode(buffer[4 : 4 + size])
            buffer = buffer[4 + size :]
            payload = encode(message)
            sock.sendall(_HEADER.pack(len(payload)) + payload)
        return
    for step in range(STEPS):
        payload = encode(_batch(step))
        sock.sendall(_HEADER.pack(len(payload)) + payload)
    sock.sendall(_HEADER.pack(0))


def _child_pipe(conn: Any, mode: str) -> None:
    if mode == "ping":
        for _ in range(PINGS):
            conn.send(conn.recv())
        return
    for step in range(STEPS):
        conn.send(_batch(step))
    conn.send(None)


def _child_zmq(address: str, back: str, mode: str) -> None:
    import msgpack
    import zmq

    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.connect(address)
    if mode == "ping":
        pull = context.socket(zmq.PULL)
        pull.connect(back)
        for _ in range(PINGS):
            push.send(msgpack.packb(msgpack.unpackb(pull.recv())))
    else:
        for step in range(STEPS):
            push.send(msgpack.packb(_batch(step)))
        push.send(b"")
    push.close(linger=1000)
    context.term()


# --- the parent (front end) side, on the event loop ---


async def _read_stream(sock: socket.socket, codec: str, mode: str) -> int:
    loop = asyncio.get_running_loop()
    _, decode = _codec(codec)
    sock.setblocking(False)
    done: asyncio.Future[int] = loop.create_future()
    state = {"buffer": bytearray(), "count": 0}
    encode, _ = _codec(codec)

    def readable() -> None:
        try:
            data = sock.recv(262144)
        except BlockingIOError:
            return
        buffer = state["buffer"]
        assert isinstance(buffer, bytearray)
        buffer += data
        offset = 0
        while len(buffer) - offset >= 4:
            size = _HEADER.unpack_from(buffer, offset)[0]
            if size == 0 and mode == "stream":
                loop.remove_reader(sock.fileno())
                done.set_result(int(state["count"]))  # type: ignore[call-overload]
                return
            if len(buffer) - offset - 4 < size:
                break
            decode(bytes(buffer[offset + 4 : offset + 4 + size]))
            offset += 4 + size
            state["count"] = int(state["count"]) + 1  # type: ignore[call-overload]
            if mode == "ping":
                if state["count"] == PINGS:
                    loop.remove_reader(sock.fileno())
                    done.set_result(PINGS)
                    return
                payload = encode([1, "ping", [1, 2, 3]])
                sock.send(_HEADER.pack(len(payload)) + payload)
        del buffer[:offset]

    loop.add_reader(sock.fileno(), readable)
    if mode == "ping":
        payload = encode([1, "ping", [1, 2, 3]])
        sock.send(_HEADER.pack(len(payload)) + payload)
    return await done


async def _read_pipe(conn: Any, mode: str) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    count = 0

    def readable() -> None:
        nonlocal count
        while conn.poll():
            message = conn.recv()
            if message is None:
                loop.remove_reader(conn.fileno())
                done.set_result(count)
                return
            count += 1
            if mode == "ping":
                if count == PINGS:
                    loop.remove_reader(conn.fileno())
                    done.set_result(count)
                    return
                conn.send([1, "ping", [1, 2, 3]])

    loop.add_reader(conn.fileno(), readable)
    if mode == "ping":
        conn.send([1, "ping", [1, 2, 3]])
    return await done


async def _read_zmq(pull: Any, push: Any, mode: str) -> int:
    import msgpack

    count = 0
    if mode == "ping":
        await push.send(msgpack.packb([1, "ping", [1, 2, 3]]))
    while True:
        data = await pull.recv()
        if not data:
            return count
        msgpack.unpackb(data)
        count += 1
        if mode == "ping":
            if count == PINGS:
                return count
            await push.send(msgpack.packb([1, "ping", [1, 2, 3]]))


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def run(candidate: str, mode: str) -> dict[str, float]:
    import uvloop

    ctx = multiprocessing.get_context("fork")
    cpu0, kids0 = _cpu()
    started = time.perf_counter()
    if candidate.startswith("unix"):
        codec = candidate.split("+")[1]
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        process = ctx.Process(target=_child_stream, args=(child, codec, mode))
        process.start()
        child.close()
        count = uvloop.run(_read_stream(parent, codec, mode))
        parent.close()
    elif candidate == "pipe+pickle":
        parent_conn, child_conn = ctx.Pipe()
        process = ctx.Process(target=_child_pipe, args=(child_conn, mode))
        process.start()
        child_conn.close()
        count = uvloop.run(_read_pipe(parent_conn, mode))
    else:
        import zmq
        import zmq.asyncio

        path = f"ipc:///tmp/bench-transport-{os.getpid()}"
        back = path + "-back"

        async def main() -> int:
            context = zmq.asyncio.Context()
            pull = context.socket(zmq.PULL)
            pull.bind(path)
            push = context.socket(zmq.PUSH)
            push.bind(back)
            process = ctx.Process(target=_child_zmq, args=(path, back, mode))
            process.start()
            try:
                return await _read_zmq(pull, push, mode)
            finally:
                process.join()
                pull.close(0)
                push.close(0)
                context.term()

        count = uvloop.run(main())
        process = None
    if process is not None:
        process.join()
    elapsed = time.perf_counter() - started
    cpu1, kids1 = _cpu()
    per = count if count else 1
    return {
        "messages": count,
        "seconds": elapsed,
        "us_per_message": elapsed / per * 1e6,
        "front_cpu_us": (cpu1 - cpu0) / per * 1e6,
        "engine_cpu_us": (kids1 - kids0) / per * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    candidates = ["unix+pickle", "pipe+pickle"]
    try:
        import msgpack  # noqa: F401

        candidates.append("unix+msgpack")
        import zmq  # noqa: F401

        candidates.append("zmq+msgpack")
    except ImportError:
        pass
    print(f"load: {os.getloadavg()}  steps={STEPS} batch={BATCH} pings={PINGS}")
    for mode in ("stream", "ping"):
        for candidate in candidates:
            rows = sorted(
                (run(candidate, mode) for _ in range(args.repeats)),
                key=lambda r: r["us_per_message"],
            )
            r = rows[len(rows) // 2]
            print(
                f"{mode:6} {candidate:13} {r['us_per_message']:7.1f} us/message wall"
                f"  front CPU {r['front_cpu_us']:6.1f} us  engine CPU {r['engine_cpu_us']:6.1f} us"
            )


if __name__ == "__main__":
    main()
