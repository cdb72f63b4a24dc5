"""Settings: embedded defaults, environment and file precedence, and wrong values named at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config import (
    GPU_MEASUREMENT,
    MeasurementSettings,
    Settings,
    SettingsError,
    WebSettings,
    load_settings,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("BENCHFARM_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_embedded_defaults() -> None:
    settings = load_settings()
    assert settings.database_url == "sqlite:///.benchfarm/benchfarm.db"
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.bundles_dir == Path(".benchfarm/bundles")


def test_environment_beats_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "benchfarm.toml").write_text('port = 9000\nhost = "127.0.0.2"\n[compare]\nmin_change = 0.1\n')
    monkeypatch.setenv("BENCHFARM_PORT", "9100")
    settings = load_settings()
    assert settings.port == 9100
    assert settings.host == "127.0.0.2"
    assert settings.compare.min_change == 0.1


def test_nested_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHFARM_MEASUREMENT__MIN_SAMPLES", "25")
    assert load_settings().measurement.min_samples == 25


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("BENCHFARM_PORT", "eighty", "BENCHFARM_PORT"),
        ("BENCHFARM_PORT", "70000", "BENCHFARM_PORT"),
        ("BENCHFARM_DATABASE_URL", "mysql://x", "BENCHFARM_DATABASE_URL"),
        ("BENCHFARM_COMPARE__MIN_CHANGE", "2", "BENCHFARM_COMPARE__MIN_CHANGE"),
        ("BENCHFARM_PROT", "8080", "BENCHFARM_PROT"),
    ],
)
def test_wrong_setting_is_named(monkeypatch: pytest.MonkeyPatch, name: str, value: str, named: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named):
        load_settings()


def test_bad_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "conf.toml"
    bad.write_text("port = [\n")
    monkeypatch.setenv("BENCHFARM_CONFIG", str(bad))
    with pytest.raises(SettingsError, match=f"config file {re.escape(str(bad))} is not valid TOML: Invalid value"):
        load_settings()
    bad.write_bytes(b"host = '\xff'\n")
    with pytest.raises(SettingsError, match="conf.toml is not valid TOML"):
        load_settings()
    monkeypatch.setenv("BENCHFARM_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(SettingsError, match=r"BENCHFARM_CONFIG names .*absent\.toml, which is not a file"):
        load_settings()
    bad.write_text("colour = 'blue'\n")
    monkeypatch.setenv("BENCHFARM_CONFIG", str(bad))
    with pytest.raises(SettingsError, match=r"colour \(env BENCHFARM_COLOUR, or in .*conf\.toml\): Extra inputs"):
        load_settings()
    bad.write_text("[measurement]\nmin_samples = 9\ncolour = 'blue'\n")
    with pytest.raises(SettingsError, match=r"measurement\.colour \(env BENCHFARM_MEASUREMENT__COLOUR, or in "
                                            r".*conf\.toml\): Extra inputs"):
        load_settings()


def test_the_file_is_read_by_each_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Found and read when settings are loaded, not when the module is imported; a Settings made
    directly (as tests do) reads none."""
    named = tmp_path / "elsewhere" / "farm.toml"
    named.parent.mkdir()
    named.write_text("port = 9300\n")
    (tmp_path / "benchfarm.toml").write_text("port = 9301\n")
    assert load_settings().port == 9301                    # ./benchfarm.toml by default
    monkeypatch.setenv("BENCHFARM_CONFIG", str(named))
    assert load_settings().port == 9300                    # the one named instead
    named.write_text("port = 9302\n")
    assert load_settings().port == 9302                    # read again
    assert Settings().port == 8080


def test_file_tables_merge_with_nested_environment_and_overrides(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """Sources merge key by key at every depth, each key from the first source that has it."""
    (tmp_path / "benchfarm.toml").write_text(
        "[compare]\nmin_change = 0.1\nmax_pvalue = 0.05\n[web]\npublic = false\nsession_hours = 2.0\n")
    monkeypatch.setenv("BENCHFARM_COMPARE__MAX_PVALUE", "0.02")
    monkeypatch.setenv("BENCHFARM_WEB__SESSION_HOURS", "3")
    settings = load_settings(web={"public": True})
    assert (settings.compare.min_change, settings.compare.max_pvalue) == (0.1, 0.02)   # file, environment
    assert (settings.web.public, settings.web.session_hours) == (True, 3.0)       # override, environment
    assert settings.web.page_rows == WebSettings().page_rows                      # default


def test_nested_environment_beats_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "benchfarm.toml").write_text("[measurement]\nmin_samples = 7\nrounds = 3\n"
                                             "[measurement.device_overrides.gpu]\nmin_time_s = 1.0\n")
    monkeypatch.setenv("BENCHFARM_MEASUREMENT__MIN_SAMPLES", "25")
    monkeypatch.setenv("BENCHFARM_MEASUREMENT__DEVICE_OVERRIDES__GPU__MAX_TIME_S", "9")
    settings = load_settings()
    assert settings.measurement.min_samples == 25          # the environment's
    assert settings.measurement.rounds == 3                # the file's, beside it in the same table
    gpu = settings.measurement.for_device("nvidia-h100-sxm", "gpu")
    assert (gpu.min_time_s, gpu.max_time_s) == (1.0, 9.0)  # both tables' keys, merged
    assert gpu.max_rel_noise == GPU_MEASUREMENT["max_rel_noise"]   # and the GPU default neither sets, kept
    assert load_settings(port=9200).port == 9200           # explicit overrides beat both


def test_one_device_class_configured_keeps_the_gpu_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Setting a smaller GPU's placement budget once replaced the whole default dict: every GPU lost its
    timing defaults (0.3 s, not 0.2 s; a 1 % noise target, not 0.5 %) and its copy budget."""
    monkeypatch.setenv("BENCHFARM_MEASUREMENT__DEVICE_OVERRIDES__NVIDIA_L4__PLACEMENT_TOTAL_BYTES", str(12 << 30))
    measurement = load_settings().measurement
    l4, h100 = measurement.for_device("nvidia_l4", "gpu"), measurement.for_device("nvidia-h100", "gpu")
    assert l4.placement_total_bytes == 12 << 30 and h100.placement_total_bytes == GPU_MEASUREMENT["placement_total_bytes"]
    for gpu in (l4, h100):
        assert (gpu.min_time_s, gpu.max_rel_noise) == (GPU_MEASUREMENT["min_time_s"], GPU_MEASUREMENT["max_rel_noise"])
    # given to MeasurementSettings itself, overrides are exactly what is given (benches time GPUs with {})
    assert MeasurementSettings(device_overrides={}).for_device("nvidia-h100", "gpu") == MeasurementSettings(
        device_overrides={})


def test_wrong_nested_value_names_its_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "benchfarm.toml").write_text("[measurement]\nmin_samples = 1\n")
    with pytest.raises(SettingsError, match="measurement.min_samples.*benchfarm.toml"):
        load_settings()
