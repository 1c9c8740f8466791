"""A TLS front for a plain TCP server, for tests of the tier over HTTPS: run as a script in a child
process (a thread of the test process would stall while a binding holds the GIL), it listens on
127.0.0.1 at a port the kernel picked, prints that port, and relays every connection, decrypted,
to the target port; it exits when its stdin closes.

    python tests/_tls_proxy.py CERT KEY TARGET_PORT
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading

HOST = "127.0.0.1"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(conn: socket.socket, ctx: ssl.SSLContext, target: int) -> None:
    try:
        tls = ctx.wrap_socket(conn, server_side=True)
    except (OSError, ssl.SSLError):  # a client that refused our certificate
        conn.close()
        return
    with tls, socket.create_connection((HOST, target)) as back:
        t = threading.Thread(target=_pipe, args=(back, tls), daemon=True)
        t.start()
        _pipe(tls, back)
        t.join()


def main(cert: str, key: str, target: int) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.create_server((HOST, 0))
    print(listener.getsockname()[1], flush=True)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_serve, args=(conn, ctx, target), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()  # until the test closes it


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
