"""
The front's direct socket I/O, and the invariant it keeps: only on the
reactor's own TCP and UNIX transports (TLS encrypts, and a wrapper such as a
PROXY header's reads bytes of its own), and a send only while the transport
has never queued anything, so that no byte overtakes what the transport
holds.  Direct, a keep-alive answer leaves in the turn its request came,
not a reactor turn and two epoll changes later; what came with a deferred
accept is read as the connection is made.
"""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet.interfaces import IProtocol, IReadWriteDescriptor, ISSLTransport

#: what a read at connection takes at most (the transport's own read size)
READ_SIZE = 65536


def direct_socket(transport: Any) -> socket.socket | None:
    """
    The socket under ``transport`` when answers may go straight to it.
    """
    if ISSLTransport.providedBy(transport):
        return None
    get_handle = getattr(transport, "getHandle", None)
    handle = get_handle() if get_handle is not None else None
    return handle if isinstance(handle, socket.socket) else None


def read_now(transport: Any, sock: socket.socket) -> bytes:
    """
    What came with the connection, read without waiting a reactor turn (the
    transport reads nothing before the reactor reports the socket
    readable); ``b""`` when nothing came yet, or on a transport that is not
    the reactor's own (an end of stream is left to the transport).

    :raise OSError: the socket failed.
    """
    if not IReadWriteDescriptor.providedBy(transport) or IProtocol.providedBy(transport):
        return b""
    try:
        return sock.recv(READ_SIZE)
    except (BlockingIOError, InterruptedError):
        return b""


def send_now(sock: socket.socket, data: bytes) -> int:
    """
    The bytes of ``data`` the socket took at once: 0 on ``EAGAIN``, or on an
    error the transport sees at its next turn.
    """
    try:
        return sock.send(data)
    except OSError:
        return 0
