"""The adb wrapper's parsers and error classification (no adb needed); end to end: test_adb_phone.py."""

from __future__ import annotations

from pipeline.agents.adb import (
    Adb, AdbError, DeviceGone, DeviceOffline, DeviceUnauthorized, hex_mask, parse_devices, parse_getprop,
)
from pipeline.agents.runners.adb_runner import parse_temperatures


def test_parse_devices() -> None:
    text = (
        "* daemon started successfully\nList of devices attached\n"
        "1A2B3C4D       device usb:1-1 product:husky model:Pixel_8_Pro device:husky transport_id:3\n"
        "127.0.0.1:5555 offline transport_id:4\n"
        "R5CW12345      unauthorized usb:1-2 transport_id:5\n\n"
    )
    entries = parse_devices(text)
    assert [(e.serial, e.state) for e in entries] == [
        ("1A2B3C4D", "device"), ("127.0.0.1:5555", "offline"), ("R5CW12345", "unauthorized")]
    assert entries[0].details["model"] == "Pixel_8_Pro" and entries[0].details["transport_id"] == "3"


def test_parse_getprop_and_masks() -> None:
    props = parse_getprop("[ro.product.model]: [Pixel 8 Pro]\n[ro.soc.model]: [Tensor G3]\n[empty]: []\nnoise\n")
    assert props == {"ro.product.model": "Pixel 8 Pro", "ro.soc.model": "Tensor G3", "empty": ""}
    assert hex_mask([4, 5, 6, 7]) == "f0" and hex_mask([8]) == "100" and hex_mask([0, 1, 2, 3]) == "f"


def test_temperatures_in_millidegrees_or_degrees() -> None:
    text = "cpu-big 61500\nbattery 31\nbroken -273000\nnothing \nskin 39000\nskin 41000\n"
    assert parse_temperatures(text) == {"cpu-big": 61.5, "battery": 31.0, "skin": 41.0}


def test_errors_name_the_state() -> None:
    assert isinstance(Adb._error(["shell", "id"], "X", 1, "adb: device unauthorized.\nThis adb server's..."),
                      DeviceUnauthorized)
    assert isinstance(Adb._error(["shell", "id"], "X", 1, "adb: error: device offline"), DeviceOffline)
    assert isinstance(Adb._error(["shell", "id"], "X", 1, "adb: device 'X' not found"), DeviceGone)
    other = Adb._error(["push", "a", "b"], "X", 1, "adb: error: failed to copy 'a' to 'b': read-only file system")
    assert type(other) is AdbError and "read-only" in str(other)
