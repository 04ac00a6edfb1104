"""Ports of 127.0.0.1 that hold something other than a live task: a
stopped process's (the kernel accepts, nothing answers), another
program's, and one that answers as a gRPC server would."""

import contextlib
import socket
import threading

# A gRPC server's first frame: an empty SETTINGS frame (type 4).
SETTINGS_FRAME = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP_ERROR = b"HTTP/1.0 400 Bad request\r\n\r\n"


@contextlib.contextmanager
def listening(reply=None):
    """Yields 'HOST:PORT' of a port that accepts connections and sends
    reply (bytes) to each; None: answers nothing, as a stopped process."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    serve(server, reply)
    try:
        yield "127.0.0.1:%d" % server.getsockname()[1]
    finally:
        server.close()


def serve(server, reply=None):
    """Listens on server (a bound socket), sending reply (bytes) to each
    connection; None: answers nothing."""
    server.listen(8)
    if reply is not None:
        threading.Thread(
            target=_answer, args=(server, reply), daemon=True
        ).start()


def _answer(server, reply):
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.recv(64)
            conn.sendall(reply)
