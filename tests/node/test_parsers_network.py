"""The network parsers on real recorded outputs (tests/fixtures/ibstat, ibv_devinfo, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.model import FLAP_LINE_CHARS, FLAP_LINES, LinkFlap
from validator.node.parsers import ib_sysfs
from validator.node.parsers.base import ParseError
from validator.node.parsers.ib_link_flaps import parse_link_flaps
from validator.node.parsers.ibstat import parse_ibstat
from validator.node.parsers.ibv_devinfo import parse_ibv_devinfo

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _read(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text(encoding="utf-8")


def test_ibstat_hdr_infiniband_with_a_port_down() -> None:
    cas = parse_ibstat(_read("ibstat", "nccl-tests-128-cx6-hdr-ib-one-down.txt"))
    assert [ca.name for ca in cas] == ["mlx5_0", "mlx5_1"]
    assert (cas[0].ca_type, cas[0].firmware, cas[0].node_guid) == (
        "MT4123",
        "20.33.1048",
        "0x1070fd03008eb580",
    )
    up, down = cas[0].ports[0], cas[1].ports[0]
    assert (up.number, up.state, up.phys_state, up.rate, up.link_layer) == (
        1,
        "Active",
        "LinkUp",
        200.0,
        "InfiniBand",
    )
    assert (down.state, down.phys_state, down.rate) == ("Down", "Disabled", 10.0)


def test_ibstat_connectx7_roce_ports_are_ethernet() -> None:
    cas = parse_ibstat(_read("ibstat", "mooncake-1999-cx7-roce-200.txt"))
    assert {ca.ca_type for ca in cas} == {"MT4129"}
    assert [p.link_layer for ca in cas for p in ca.ports] == ["Ethernet", "Ethernet"]


def test_ibstat_two_ports_one_polling() -> None:
    (ca,) = parse_ibstat(_read("ibstat", "linux-rdma-2020-02-mlx4-polling.txt"))
    assert [(p.number, p.state, p.phys_state) for p in ca.ports] == [
        (1, "Down", "Polling"),
        (2, "Down", "Disabled"),
    ]


def test_ibstat_keeps_the_cas_before_an_ibpanic_and_reads_nothing_as_no_hca() -> None:
    text = _read("ibstat", "mooncake-1999-cx7-roce-200.txt") + (
        "ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file or directory\n"
    )
    assert len(parse_ibstat(text)) == 2
    assert parse_ibstat("") == []  # Debian's ibstat on a host with no HCA prints nothing


@pytest.mark.parametrize(
    "text",
    ["hello world\n", "Port 1:\n\tState: Active\n", "ibpanic: [1] main: cannot open umad\n"],
)
def test_ibstat_nonsense_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ibstat(text)


def test_ibv_devinfo_connectx7_psid_firmware_and_port_down() -> None:
    (hca,) = parse_ibv_devinfo(_read("ibv_devinfo", "deepep-38-cx7-ndr-port-down.txt"))
    assert (hca.name, hca.fw_ver, hca.board_id, hca.vendor_part_id) == (
        "mlx5_0",
        "28.39.2048",
        "MT_0000000838",
        "4129",
    )
    (port,) = hca.ports
    assert (port.number, port.state, port.link_layer) == (1, "PORT_DOWN", "InfiniBand")


def test_ibv_devinfo_roce_and_no_device() -> None:
    (hca,) = parse_ibv_devinfo(_read("ibv_devinfo", "azhpc-images-44-two-hcas.txt"))
    assert (hca.board_id, hca.ports[0].state, hca.ports[0].link_layer) == (
        "MSF0010110035",
        "PORT_ACTIVE",
        "Ethernet",
    )
    assert parse_ibv_devinfo("No IB devices found\n") == []
    with pytest.raises(ParseError):
        parse_ibv_devinfo("transport: InfiniBand (0)\n")


def test_sysfs_values_of_a_real_h100_node() -> None:
    tree = ib_sysfs.parse_tree(_read("infiniband-sysfs", "gpud-h100-values.txt"))
    root = "/sys/class/infiniband"
    assert ib_sysfs.parse_rate(tree[f"{root}/mlx5_0/ports/1/rate"]) == 400.0
    assert ib_sysfs.parse_port_state(tree[f"{root}/mlx5_0/ports/1/state"]) == "ACTIVE"
    assert ib_sysfs.parse_phys_state(tree[f"{root}/mlx5_6/ports/1/phys_state"]) == "LinkUp"
    assert ib_sysfs.parse_word(tree[f"{root}/mlx5_7/board_id"], "PSID") == "MT_0000000838"
    assert ib_sysfs.parse_phys_state("2: Polling\n") == "Polling"
    assert ib_sysfs.parse_counter("18446744073709551615\n") == 2**64 - 1


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (ib_sysfs.parse_port_state, "ACTIVE"),
        (ib_sysfs.parse_rate, "fast"),
        (ib_sysfs.parse_counter, "-1"),
        (ib_sysfs.parse_counter, "1" * 30),
        (ib_sysfs.parse_phys_state, ""),
    ],
)
def test_sysfs_nonsense_is_a_parse_error(parse: object, text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)  # type: ignore[operator]


@pytest.mark.parametrize(
    "line",
    [
        "/etc/shadow\troot:x",
        "/sys/class/infiniband/../../etc/passwd\tx",
        "/sys/class/infiniband/mlx5_0/fw_ver no tab",
    ],
)
def test_a_tree_record_outside_the_tree_is_refused(line: str) -> None:
    with pytest.raises(ParseError):
        ib_sysfs.parse_tree(line + "\n")


def test_link_flaps_from_real_mlx5_lines() -> None:
    text = _read("ib-kernel-log", "mlx5-cable-plugged-link-up.txt")
    up0 = "[32710.060490] mlx5_core 0000:01:00.0 enp1s0f0: Link up"
    up1 = "[32710.060809] mlx5_core 0000:01:00.1 enp1s0f1: Link up"
    assert parse_link_flaps(text) == (
        LinkFlap("enp1s0f0", "0000:01:00.0", downs=0, ups=1, lines=(up0,)),
        LinkFlap("enp1s0f1", "0000:01:00.1", downs=0, ups=1, lines=(up1,)),
    )
    # The same line shape, going down twice and back up: mlx5e's "Link down".
    flapping = text + (
        "[40211.113302] mlx5_core 0000:01:00.0 enp1s0f0: Link down\n"
        "[40215.240011] mlx5_core 0000:01:00.0 enp1s0f0: Link up\n"
        "[40301.000001] mlx5_core 0000:01:00.0 enp1s0f0: Link down\n"
    )
    flap = parse_link_flaps(flapping)[0]
    assert (flap.interface, flap.downs, flap.ups) == ("enp1s0f0", 2, 2)
    assert flap.lines == (up0, *flapping.splitlines()[-3:])  # the kernel's lines, whole
    assert parse_link_flaps("[1.0] igb 0000:00:14.0 eth0: igb: eth0 NIC Link is Down\n") == ()


def test_link_flap_lines_are_bounded_in_count_and_length() -> None:
    line = "[{n}.0] mlx5_core 0000:01:00.0 ib0: Link {way}" + " x" * 400
    text = "".join(line.format(n=n, way="up" if n % 2 else "down") + "\n" for n in range(1, 101))
    (flap,) = parse_link_flaps(("y" * 5000) + text)
    assert (flap.downs, flap.ups) == (50, 50)
    assert len(flap.lines) == FLAP_LINES
    assert all(len(kept) == FLAP_LINE_CHARS for kept in flap.lines)
    assert flap.lines[-1].startswith("[100.0] mlx5_core")  # the newest kept
    long = "z" * 5000 + " mlx5_core 0000:01:00.0 ib0: Link up"
    assert parse_link_flaps(long)[0].lines == (long[-FLAP_LINE_CHARS:],)
