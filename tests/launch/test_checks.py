"""Every doctor/preflight check over faked facts: the problem is named and the fix is given."""

from __future__ import annotations

import dataclasses

import pytest

from kscale.launch import checks
from kscale.launch.checks import Level
from kscale.launch.facts import BuildInfo, Facts, Intent, Route, SSHResult
from kscale.launch.hosts import Host

GOOD_BUILD = BuildInfo(
    horovod_version="0.28.1", tensorflow_version="2.15.1", keras_version="2.15.0", tensorflow=True, gloo=True
)
TWO_HOSTS = Intent(hosts=(Host("hosta", 1), Host("hostb", 1)))


def facts(**changes) -> Facts:
    """A healthy host 'hosta' (10.99.0.1 on eth0) about to run with 'hostb' (10.99.0.2)."""
    base = Facts(
        intent=TWO_HOSTS,
        hostname="hosta",
        hostname_addresses=("10.99.0.1",),
        interfaces={"lo": ("127.0.0.1",), "eth0": ("10.99.0.1",)},
        build=GOOD_BUILD,
        remote_hosts=("hostb",),
        local_hosts=("hosta",),
        routes={"hostb": Route("hostb", "10.99.0.2", "10.99.0.1", "eth0")},
    )
    return dataclasses.replace(base, **changes)


def levels(findings: list[checks.Finding]) -> set[Level]:
    return {f.level for f in findings}


def only_error(findings: list[checks.Finding]) -> checks.Finding:
    errors = checks.errors(findings)
    assert len(errors) == 1, findings
    return errors[0]


def test_a_healthy_two_host_setup_has_no_errors():
    found = checks.run_checks(facts())
    assert not checks.errors(found), [f.render() for f in found]


def test_horovod_without_tensorflow():
    build = BuildInfo(
        horovod_version="0.28.1", error="ImportError: Extension horovod.tensorflow has not been built"
    )
    error = only_error(checks.check_horovod_build(facts(build=build)))
    assert "built without TensorFlow" in error.message and "HOROVOD_WITH_TENSORFLOW=1" in error.fix


def test_horovod_missing_or_unreadable():
    assert "not installed" in only_error(checks.check_horovod_build(facts(build=BuildInfo()))).message
    timed_out = BuildInfo(error="importing horovod.tensorflow took more than 180 s")
    assert "could not inspect" in only_error(checks.check_horovod_build(facts(build=timed_out))).message


def test_controller_not_built():
    mpi_intent = dataclasses.replace(TWO_HOSTS, controller="mpi")
    error = only_error(checks.check_horovod_build(facts(intent=mpi_intent)))
    assert "MPI controller" in error.message and "HOROVOD_WITH_MPI=1" in error.fix and "--gloo" in error.fix
    # Horovod's default is MPI when it was built with MPI, so an MPI-only build passes without --mpi.
    mpi_only = dataclasses.replace(GOOD_BUILD, gloo=False, mpi=True)
    assert checks.controller(facts(build=mpi_only)) == "mpi"
    assert not checks.errors(checks.check_horovod_build(facts(build=mpi_only)))


def test_gpus_without_nccl_warn():
    build = dataclasses.replace(GOOD_BUILD, gpus=("/physical_device:GPU:0",))
    found = checks.check_gpus(facts(build=build))
    assert Level.WARN in levels(found) and "HOROVOD_GPU_OPERATIONS=NCCL" in found[-1].fix
    assert levels(checks.check_gpus(facts(build=dataclasses.replace(GOOD_BUILD, gpus=())))) == {Level.INFO}


ONE_GPU = ("GPU 0: NVIDIA H200 (UUID: GPU-367031c7)",)


@pytest.mark.parametrize("engine", ["torch", "jax"])
def test_two_workers_on_one_gpu_fail_with_the_fix_where_each_takes_a_gpu(engine):
    """What the lent H200 showed (benchmarks/RESULTS.md): one GPU, and the torch and jax engines give
    each process one of its own."""
    two = Intent(engine=engine, processes_here=2)
    error = only_error(checks.check_gpus(facts(intent=two, build=None, nvidia_gpus=ONE_GPU)))
    assert "2 worker processes on this host, but only 1 GPU(s) are visible" in error.message
    assert "NVIDIA H200" in error.message and ("NCCL" in error.message) is (engine == "torch")
    assert "-np 1" in error.fix and "CUDA_VISIBLE_DEVICES= kscale run" in error.fix
    found = checks.check_gpus(
        facts(intent=dataclasses.replace(two, processes_here=1), build=None, nvidia_gpus=ONE_GPU)
    )
    assert levels(found) == {Level.OK} and "1 visible to the NVIDIA driver" in found[0].message


def test_gpus_shared_only_matter_where_each_process_takes_one():
    assert checks.shared_gpu_problem("horovod", 2, ONE_GPU) is None  # TensorFlow's engines: not checked
    assert checks.shared_gpu_problem("torch", 2, ()) is None  # no GPU: Gloo on CPUs
    assert checks.shared_gpu_problem("jax", 2, ONE_GPU * 2) is None
    assert levels(checks.check_gpus(facts(build=None, nvidia_gpus=()))) == {Level.INFO}
    assert checks.check_gpus(facts(build=None)) == []  # not asked


def test_memlock_matters_with_mpi_or_rdma_and_gives_the_limits_conf_fix():
    assert levels(checks.check_memlock(facts(memlock_soft=64 * 1024))) == {Level.INFO}
    found = checks.check_memlock(facts(memlock_soft=64 * 1024, rdma_devices=("mlx5_0",)))
    assert levels(found) == {Level.WARN}
    assert "64 KB" in found[0].message and "Cannot allocate memory" in found[0].message
    assert "* soft memlock unlimited" in found[0].fix and "* hard memlock unlimited" in found[0].fix
    mpi = dataclasses.replace(TWO_HOSTS, controller="mpi")
    assert levels(checks.check_memlock(facts(intent=mpi, memlock_soft=65536))) == {Level.WARN}
    assert levels(checks.check_memlock(facts(memlock_soft=None))) == {Level.OK}


def test_hostname_on_loopback_fails_a_multi_host_gloo_job_with_the_hosts_fix():
    error = only_error(checks.check_hostname(facts(hostname_addresses=("127.0.0.1",))))
    assert "'hosta' resolves to 127.0.0.1" in error.message and "gloo::IoException" in error.message
    assert "10.99.0.1 hosta" in error.fix and "/etc/hosts" in error.fix


def test_hostname_on_loopback_is_fine_on_one_host_and_under_mpi():
    single = facts(intent=Intent(), remote_hosts=(), routes={}, hostname_addresses=("127.0.0.1",))
    assert levels(checks.check_hostname(single)) == {Level.INFO}
    mpi = facts(intent=dataclasses.replace(TWO_HOSTS, controller="mpi"), hostname_addresses=("127.0.0.1",))
    assert not checks.errors(checks.check_hostname(mpi))


def test_hostname_on_loopback_is_fine_for_the_tf_and_jax_engines():
    # Their servers listen on every address and are reached by the names the launch lists (measured:
    # tests/multihost, Keras 3 on TensorFlow across two hosts whose names resolve to 127.0.0.1 locally).
    for engine in ("tf", "jax"):
        found = checks.check_hostname(
            facts(intent=dataclasses.replace(TWO_HOSTS, engine=engine), hostname_addresses=("127.0.0.1",))
        )
        assert levels(found) == {Level.OK}


def test_several_nodes_on_one_machine_need_no_reachable_hostname():
    intent = Intent(master="127.0.0.1", master_port=29400, nnodes=2, controller="gloo")
    local = facts(
        intent=intent, remote_hosts=(), routes={}, master_is_local=True, master_address="127.0.0.1",
        hostname_addresses=("127.0.0.1",),
    )  # fmt: skip
    assert not checks.errors(checks.check_hostname(local))


def test_hostname_that_does_not_resolve_or_is_not_ours():
    assert "does not resolve" in only_error(checks.check_hostname(facts(hostname_addresses=()))).message
    stale = only_error(checks.check_hostname(facts(hostname_addresses=("10.99.0.7",))))
    assert "not an address of this host" in stale.message


def test_hostname_on_another_network_than_the_peers_warns():
    found = checks.check_hostname(
        facts(
            interfaces={"lo": ("127.0.0.1",), "eth0": ("10.99.0.1",), "eth1": ("192.168.1.5",)},
            hostname_addresses=("192.168.1.5",),
        )
    )
    assert levels(found) == {Level.WARN} and "eth1" in found[0].message


def test_per_node_launch_on_node_zero_uses_its_own_address_in_the_fix():
    intent = Intent(master="10.99.0.1", master_port=29400, nnodes=2, controller="gloo")
    node0 = facts(
        intent=intent, remote_hosts=(), routes={}, master_is_local=True, hostname_addresses=("127.0.0.1",)
    )
    assert "10.99.0.1 hosta" in only_error(checks.check_hostname(node0)).fix


def test_unresolvable_or_unroutable_hosts():
    found = checks.check_routes(facts(routes={"hostc": Route("hostc", error="'hostc' does not resolve")}))
    assert "does not resolve" in only_error(found).message
    assert levels(checks.check_routes(facts())) == {Level.OK}


def test_interfaces_missing_differing_or_not_common():
    named = facts(intent=dataclasses.replace(TWO_HOSTS, nics=("ib0",)))
    assert "ib0" in only_error(checks.check_interfaces(named)).message
    two_ways = facts(
        remote_hosts=("hostb", "hostc"),
        routes={
            "hostb": Route("hostb", "10.99.0.2", "10.99.0.1", "eth0"),
            "hostc": Route("hostc", "10.98.0.2", "10.98.0.1", "eth1"),
        },
    )
    assert levels(checks.check_interfaces(two_ways)) == {Level.WARN}
    disjoint = facts(ssh={"hostb": SSHResult(True, "ok", ("lo", "ens5"))})
    assert "no network interface name" in only_error(checks.check_interfaces(disjoint)).message
    common = facts(ssh={"hostb": SSHResult(True, "ok", ("lo", "eth0"))})
    assert levels(checks.check_interfaces(common)) == {Level.OK}


def test_ssh_failure_names_the_port_option():
    intent = dataclasses.replace(TWO_HOSTS, ssh_port=12345)
    found = checks.check_ssh(facts(intent=intent, ssh={"hostb": SSHResult(False, "Connection refused")}))
    error = only_error(found)
    assert "ssh -p 12345 hostb" in error.message and "Connection refused" in error.message
    assert "ssh-copy-id -p 12345 hostb" in error.fix and "--nnodes" in error.fix


def test_mpi_host_list_that_uses_an_alias_for_this_host():
    intent = Intent(hosts=(Host("ib1", 4), Host("ib2", 4)), controller="mpi")
    found = checks.check_mpi_hostnames(facts(intent=intent, hostname="minsky1", local_hosts=("ib1",)))
    assert levels(found) == {Level.WARN}
    assert "not allocated or oversubscribed" in found[0].message and "minsky1:N" in found[0].fix
    assert checks.check_mpi_hostnames(facts()) == []  # Gloo does not care


def test_rendezvous_port_in_use_on_node_zero():
    intent = Intent(master="10.99.0.1", master_port=29400, nnodes=2)
    error = only_error(checks.check_ports(facts(intent=intent, master_port_free=False, master_is_local=True)))
    assert "29400" in error.message and "--master 10.99.0.1:<free port>" in error.fix
    assert checks.check_ports(facts()) == []


@pytest.mark.parametrize("level", list(Level))
def test_every_level_renders_on_one_line_plus_the_fix(level):
    text = checks.Finding(level, "topic", "message", "line one\nline two").render()
    assert text.splitlines()[0].endswith("topic: message")
    assert text.splitlines()[1].strip() == "fix: line one" and text.splitlines()[2].strip() == "line two"
