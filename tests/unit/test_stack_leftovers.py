"""`down` removes what a stack's servers leave outside its state dir (SeaweedFS's sockets in /tmp), and never a
socket something still listens on."""

from __future__ import annotations

import socket
from pathlib import Path

from rlcleanup.stack import StackState, down, s3_server


def _stale_socket(path: Path) -> Path:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # the file stays after close: what a killed server leaves
    return path


def test_down_removes_stale_leftover_sockets_and_keeps_live_ones(tmp_path: Path) -> None:
    stale = _stale_socket(tmp_path / "stale.sock")
    live = tmp_path / "live.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(live))
    listener.listen()
    plain = tmp_path / "not-a-socket.sock"
    plain.write_text("a file that happens to have the name")
    try:
        StackState(
            state_dir=str(tmp_path), project="p", stack_id="s", leftovers=[str(stale), str(live), str(plain)]
        ).save()
        down(tmp_path)
        assert not stale.exists()
        assert live.exists(), "a socket that still accepts connections is another server's"
        assert plain.read_text().startswith("a file"), "only sockets are removed"
    finally:
        listener.close()


def test_socket_paths_are_named_by_the_allocated_ports() -> None:
    ports = {name: 40000 + i for i, name in enumerate(s3_server.ports())}
    names = {path.name for path in s3_server.socket_paths(ports)}
    assert f"seaweedfs-master-grpc-{ports['master.grpc']}.sock" in names
    assert f"seaweedfs-s3-{ports['s3']}.sock" in names
    assert all(path.parent == Path("/tmp") for path in s3_server.socket_paths(ports))
