"""A worker's own backup folder: a killed worker's is deleted by the next one on its host, a running one's kept."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile

from kscale.callbacks import shared_backup


def test_the_folders_of_processes_that_no_longer_run_are_deleted(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    mine = f"{shared_backup.SCRATCH_PREFIX}{socket.gethostname()}-"
    killed = tmp_path / f"{mine}{ended.pid}-abc"
    running = tmp_path / f"{mine}{os.getpid()}-def"
    other_host = tmp_path / f"{shared_backup.SCRATCH_PREFIX}elsewhere-{ended.pid}-ghi"
    for folder in (killed, running, other_host):
        folder.mkdir()
        (folder / "checkpoint.weights.h5").write_bytes(b"weights")

    made = shared_backup.scratch_folder()

    assert not killed.exists()
    assert running.exists() and other_host.exists()
    assert os.path.basename(made).startswith(f"{mine}{os.getpid()}-") and os.path.isdir(made)
