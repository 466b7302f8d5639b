"""Host lists, hostfiles and SLURM node lists: what people write, and errors that show the expected form."""

from __future__ import annotations

import pytest

from kscale.errors import LaunchError
from kscale.launch.hosts import (
    Host,
    expand_slurm_nodelist,
    format_hosts,
    parse_host_list,
    parse_hostfile,
    total_slots,
)


def test_host_list_as_horovodrun_takes_it():
    hosts = parse_host_list("localhost:2, 10.0.0.2:4,worker-1.example.com:1")
    assert hosts == [Host("localhost", 2), Host("10.0.0.2", 4), Host("worker-1.example.com", 1)]
    assert format_hosts(hosts) == "localhost:2,10.0.0.2:4,worker-1.example.com:1"
    assert total_slots(hosts) == 7


@pytest.mark.parametrize("spec", ["worker-0", "worker-0:", "worker-0:x", "worker-0:0", "a b:2", ","])
def test_bad_host_list_entry_is_named_with_the_expected_form(spec):
    with pytest.raises(LaunchError, match=r"host:slots|names no hosts"):
        parse_host_list(spec)


def test_a_host_listed_twice_is_refused():
    with pytest.raises(LaunchError, match="listed twice"):
        parse_host_list("a:2,b:2,a:1")


def test_hostfile_with_comments_blank_lines_and_default_slots(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the cluster\n\nnode1 slots=4\nnode2 slots=2 max_slots=8  # spare\nnode3\n")
    assert parse_hostfile(path) == [Host("node1", 4), Host("node2", 2), Host("node3", 1)]


def test_hostfile_errors_give_file_and_line(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node1 slots=4\nnode2 cpus=2\n")
    with pytest.raises(LaunchError, match=r"hosts:2: .*host slots=N"):
        parse_hostfile(path)
    with pytest.raises(LaunchError, match="cannot read hostfile"):
        parse_hostfile(tmp_path / "missing")
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(LaunchError, match="lists no hosts"):
        parse_hostfile(tmp_path / "empty")


@pytest.mark.parametrize(
    ("nodelist", "expected"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ],
)
def test_slurm_nodelist_without_scontrol(nodelist, expected):
    assert expand_slurm_nodelist(nodelist, use_scontrol=False) == expected


def test_slurm_nodelist_with_a_bad_range():
    with pytest.raises(LaunchError, match="cannot read the range"):
        expand_slurm_nodelist("gpu[a-b]", use_scontrol=False)
