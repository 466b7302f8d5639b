"""SSH launch across two hosts: `kscale run -np 2 -H hosta:1,hostb:1 -p 2222 --ssh-identity-file KEY` on hosta.

kscale hands the job to Horovod's own runner, which ssh-es to hostb to start rank 1, as on a real cluster.
Each namespace host runs a private sshd (throwaway host key, one authorized client key, port 2222 on its
own 10.99.0.x address only); the system ssh service is never started. The ssh client runs through a small
wrapper that adds `-F CONFIG`, so nothing is read from or written to ~/.ssh (no known_hosts entries).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.netns]

SSHD = Path("/usr/sbin/sshd")
SSH = Path("/usr/bin/ssh")
PORT = 2222
PASS = "kscale selftest PASS"

#: Says where the rank runs (host name, and the ssh connection that started it, if any), then runs the
#: self-test in the same process: `python WHERE` stands for `python -m kscale.selftest`.
WHERE_SCRIPT = """\
import os, runpy, socket, sys

print(
    f"where: rank={os.environ.get('HOROVOD_RANK')} host={socket.gethostname()} "
    f"ssh={os.environ.get('SSH_CONNECTION', 'none').replace(' ', ',')}",
    flush=True,
)
sys.argv[0] = "kscale.selftest"
runpy.run_module("kscale.selftest", run_name="__main__", alter_sys=True)
"""


@dataclasses.dataclass(frozen=True)
class SshCluster:
    hosts: Any  # conftest's TwoHosts
    identity: Path  # the client's private key
    bin_dir: Path  # holds the `ssh` wrapper; put it first on PATH
    where: Path  # WHERE_SCRIPT
    sshd_logs: tuple[Path, ...]

    def logs(self) -> str:
        return "\n".join(f"--- {log.name} ---\n{log.read_text()[-3000:]}" for log in self.sshd_logs)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.fail(
            f"`{' '.join(argv)}` failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()}"
        )


def _keygen(path: Path) -> None:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kscale-test", "-f", str(path)])


def _sshd_config(host: Any, tmp: Path, host_key: Path, authorized: Path) -> Path:
    # No SetEnv/AcceptEnv: Horovod starts remote workers as `cd CWD; env VAR=... /abs/venv/python ...`
    # with the launcher's whole environment (PATH, PYTHONPATH, ...) on the command line.
    config = tmp / f"sshd_config.{host.hostname}"
    config.write_text(
        textwrap.dedent(
            f"""\
            Port {PORT}
            ListenAddress {host.address}
            HostKey {host_key}
            AuthorizedKeysFile {authorized}
            PidFile {tmp / f"sshd.{host.hostname}.pid"}
            PermitRootLogin prohibit-password
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            PrintMotd no
            LogLevel VERBOSE
            """
        )
    )
    return config


def _wait_for_ssh(cluster: SshCluster, deadline: float) -> None:
    """Until each sshd answers a real login from hosta (the way Horovod will log in)."""
    hosta = cluster.hosts.hosts[0]
    env = {**os.environ, "PATH": f"{cluster.bin_dir}:{os.environ['PATH']}"}
    for host in cluster.hosts.hosts:
        probe = ["ssh", "-p", str(PORT), "-i", str(cluster.identity), host.hostname, "hostname"]
        while True:
            done = subprocess.run(hosta.command(probe), capture_output=True, text=True, timeout=30, env=env)
            if done.returncode == 0 and done.stdout.strip() == host.hostname:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the private sshd on {host.hostname} ({host.address}:{PORT}) did not accept a key login: "
                    f"ssh exit {done.returncode}, {(done.stdout + done.stderr).strip()!r}\n{cluster.logs()}"
                )
            time.sleep(0.2)


@pytest.fixture
def ssh_cluster(two_hosts: Any, tmp_path: Path) -> Iterator[SshCluster]:
    """A private sshd on each namespace host, a client key they accept, an ssh client that trusts them."""
    if not SSHD.is_file() or not SSH.is_file():
        pytest.fail(
            f"the SSH launch test needs the OpenSSH server and client ({SSHD}, {SSH}); missing: "
            f"{[str(p) for p in (SSHD, SSH) if not p.is_file()]}. `make test` installs them as root "
            "(target `sshd`); by hand: apt-get install openssh-server openssh-client. "
            "The system ssh service is not needed: the test starts its own sshd."
        )
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    host_key, identity = keys / "host_ed25519", keys / "client_ed25519"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _keygen(host_key)
        _keygen(identity)
        authorized = keys / "authorized_keys"
        authorized.write_text(identity.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        # sshd refuses to start without its (empty) privilege-separation directory, which the ssh service
        # would make. It stays: a concurrent run of this test may have an sshd using it.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        client_config = tmp_path / "ssh_config"
        client_config.write_text(
            textwrap.dedent(
                """\
                Host *
                  StrictHostKeyChecking no
                  UserKnownHostsFile /dev/null
                  GlobalKnownHostsFile /dev/null
                  BatchMode yes
                  IdentitiesOnly yes
                  ConnectTimeout 10
                  LogLevel ERROR
                """
            )
        )
        wrapper = bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F {client_config} "$@"\n')
        wrapper.chmod(0o755)
        where = tmp_path / "where.py"
        where.write_text(WHERE_SCRIPT)

        logs = []
        for host in two_hosts.hosts:
            config = _sshd_config(host, tmp_path, host_key, authorized)
            _run([str(SSHD), "-t", "-f", str(config)])  # a config error shows here, with its reason
            log = tmp_path / f"sshd.{host.hostname}.log"
            with log.open("w") as out:
                procs.append(
                    subprocess.Popen(
                        host.command([str(SSHD), "-D", "-e", "-f", str(config)]),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            logs.append(log)
        cluster = SshCluster(two_hosts, identity, bin_dir, where, tuple(logs))
        _wait_for_ssh(cluster, deadline=time.monotonic() + 20)
        yield cluster
    finally:
        for proc in procs:  # ip netns exec, unshare and sh all exec: proc.pid is sshd itself
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for key in keys.glob("*"):
            key.unlink()


def _where(output: str, rank: int) -> dict[str, str]:
    """What WHERE_SCRIPT printed for `rank` ({"rank": ..., "host": ..., "ssh": ...}); {} if not once."""
    lines = [line for line in output.splitlines() if line.startswith(f"[{rank}]<stdout>:where: ")]
    if len(lines) != 1:
        return {}
    return dict(field.split("=", 1) for field in lines[0].split("where: ", 1)[1].split())


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "nics",
    [
        pytest.param(["--network-interfaces", "eth0"], id="nic-given"),
        # No NIC: Horovod first ssh-es a task service to each host, and they find the routed NIC together.
        pytest.param([], id="nic-probed"),
    ],
)
def test_ssh_launch_runs_rank_1_on_the_other_host(ssh_cluster: SshCluster, nics: list[str]):
    hosta, hostb = ssh_cluster.hosts.hosts
    argv = [
        "run",
        "-np",
        "2",
        "-H",
        f"{hosta.hostname}:1,{hostb.hostname}:1",
        "-p",
        str(PORT),
        "--ssh-identity-file",
        str(ssh_cluster.identity),
        *nics,
        "--disable-cache",  # else Horovod remembers "ssh works" in ~/.horovod
        "--",
        sys.executable,
        str(ssh_cluster.where),
    ]
    path = f"{ssh_cluster.bin_dir}:{os.environ['PATH']}"  # the ssh wrapper first
    (result,) = ssh_cluster.hosts.kscale_on([(hosta, argv)], timeout=180, PATH=path)
    report = (
        f"kscale run on hosta: exit {result.returncode} after {result.elapsed:.0f} s\n"
        f"{result.output[-6000:]}\n{ssh_cluster.logs()}"
    )
    assert result.returncode == 0, report

    digests = []
    for rank, host in enumerate((hosta, hostb)):
        passed = [
            line
            for line in result.output.splitlines()
            if line.startswith(f"[{rank}]<stdout>:") and PASS in line
        ]
        assert len(passed) == 1 and f"rank={rank} size=2" in passed[0], report
        digests.append(passed[0].rsplit("weights=", 1)[1].strip())
        where = _where(result.output, rank)
        assert where.get("rank") == str(rank) and where.get("host") == host.hostname, report
    assert digests[0] == digests[1], report  # both hosts hold the same trained weights

    # Rank 0 runs beside the launcher; rank 1 was started through hostb's sshd, by a client on hosta.
    assert _where(result.output, 0)["ssh"] == "none", report
    client, _, server, port = _where(result.output, 1)["ssh"].split(",")  # SSH_CONNECTION, split
    assert (client, server, port) == (hosta.address, hostb.address, str(PORT)), report


@pytest.mark.timeout(180)
def test_ssh_launch_to_a_closed_port_fails_fast_and_doctor_names_it(ssh_cluster: SshCluster):
    hosta, hostb = ssh_cluster.hosts.hosts
    hosts = f"{hosta.hostname}:1,{hostb.hostname}:1"
    ssh = ["--ssh-identity-file", str(ssh_cluster.identity)]
    path = f"{ssh_cluster.bin_dir}:{os.environ['PATH']}"
    closed = str(PORT + 1)  # no sshd listens there

    run = ["run", "-np", "2", "-H", hosts, "-p", closed, *ssh, "--network-interfaces", "eth0"]
    run += ["--disable-cache", "--", sys.executable, str(ssh_cluster.where)]
    (result,) = ssh_cluster.hosts.kscale_on([(hosta, run)], timeout=120, PATH=path)
    report = f"exit {result.returncode} after {result.elapsed:.0f} s\n{result.output[-4000:]}"
    assert result.returncode == 1, report
    assert f"connect to host {hostb.hostname} port {closed}: Connection refused" in result.output, report
    assert "kscale run: could not connect to some hosts via ssh" in result.output, report
    assert "`kscale doctor -H HOSTS` checks ssh" in result.output, report
    assert "where: " not in result.output, report  # no worker started

    # The doctor that message points to names the port and the fix; on the right port it is satisfied.
    for port, code, says in (
        (closed, 1, f"`ssh -p {closed} {hostb.hostname}` failed"),
        (str(PORT), 0, f"passwordless ssh to {hostb.hostname} works"),
    ):
        doctor = ["doctor", "-H", hosts, "-p", port, *ssh, "--network-interfaces", "eth0"]
        (result,) = ssh_cluster.hosts.kscale_on([(hosta, doctor)], timeout=120, PATH=path)
        report = f"doctor -p {port}: exit {result.returncode}\n{result.output[-4000:]}"
        assert result.returncode == code and says in result.output, report
