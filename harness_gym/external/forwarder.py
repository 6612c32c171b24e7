"""The in-sandbox forwarder: TCP 127.0.0.1:PORT inside the sandbox to the proxy's bind-mounted unix socket.

Runs with the sandbox's own ``python3`` (standard library only, Python >= 3.7). The sandbox keeps
no network: the CLI reaches the proxy only through this pipe, and the proxy answers only the
rollout's secret. At most ``MAX_CONNECTIONS`` (argv 5, default 16) connections are piped at once: one
past it is closed at once, so a hostile agent cannot hold the shared proxy's connection slots and
starve the other rollouts (the proxy also caps each secret's open connections).
Usage: ``python3 forwarder.py HOST PORT SOCKET READY_FILE [MAX_CONNECTIONS]``.
"""

import asyncio
import sys

DEFAULT_MAX_CONNECTIONS = 16
OPEN = [0]  # connections piped now


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # half-close: the other side still answers
    except (OSError, asyncio.CancelledError):
        writer.close()


async def _handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    if OPEN[0] >= MAX_CONNECTIONS:
        client_writer.close()  # over the cap: refused before the proxy sees it
        return
    OPEN[0] += 1
    try:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(SOCKET)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))
        client_writer.close()
        upstream_writer.close()
    finally:
        OPEN[0] -= 1


async def _main() -> None:
    server = await asyncio.start_server(_handle, HOST, PORT)
    with open(READY, "w") as ready:
        ready.write("ready\n")
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    HOST, PORT, SOCKET, READY = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    MAX_CONNECTIONS = int(sys.argv[5]) if len(sys.argv) > 5 else DEFAULT_MAX_CONNECTIONS
    asyncio.run(_main())
