"""Settings: embedded defaults, environment and file precedence, and wrong values named at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.agents.measure import for_device
from pipeline.config import (
    GPU_MEASUREMENT,
    PIPELINE_ARGUMENTS,
    REMOVED_SETTINGS,
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
    """Found and read each time settings are made, not when the module is imported: by `load_settings`
    and by a Settings made directly, as the environment is."""
    named = tmp_path / "elsewhere" / "farm.toml"
    named.parent.mkdir()
    named.write_text("port = 9300\n")
    (tmp_path / "benchfarm.toml").write_text("port = 9301\n")
    assert load_settings().port == 9301                    # ./benchfarm.toml by default
    monkeypatch.setenv("BENCHFARM_CONFIG", str(named))
    assert load_settings().port == 9300                    # the one named instead
    named.write_text("port = 9302\n")
    assert load_settings().port == 9302                    # read again
    assert Settings().port == 9302
    monkeypatch.delenv("BENCHFARM_CONFIG")
    (tmp_path / "benchfarm.toml").unlink()
    assert Settings().port == load_settings().port == 8080


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
    gpu = for_device(settings.measurement, "nvidia-h100-sxm", "gpu")
    assert (gpu.min_time_s, gpu.max_time_s) == (1.0, 9.0)  # both tables' keys, merged
    assert gpu.max_samples == GPU_MEASUREMENT["max_samples"]   # and the GPU default neither sets, kept
    assert load_settings(port=9200).port == 9200           # explicit overrides beat both


def test_one_device_class_configured_keeps_the_gpu_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Setting a smaller GPU's placement budget once replaced the whole default dict: every GPU lost its
    timing defaults (0.3 s of kernel time, not 0.1 s; no sample cap) and its copy budget."""
    monkeypatch.setenv("BENCHFARM_MEASUREMENT__DEVICE_OVERRIDES__NVIDIA_L4__PLACEMENT_TOTAL_BYTES", str(12 << 30))
    measurement = load_settings().measurement
    l4, h100 = for_device(measurement, "nvidia_l4", "gpu"), for_device(measurement, "nvidia-h100", "gpu")
    assert l4.placement_total_bytes == 12 << 30 and h100.placement_total_bytes == GPU_MEASUREMENT["placement_total_bytes"]
    for gpu in (l4, h100):
        assert (gpu.min_time_s, gpu.max_samples) == (GPU_MEASUREMENT["min_time_s"], GPU_MEASUREMENT["max_samples"])
    # given to MeasurementSettings itself, overrides are exactly what is given (benches time GPUs with {})
    assert for_device(MeasurementSettings(device_overrides={}), "nvidia-h100", "gpu") == MeasurementSettings(
        device_overrides={})


def test_wrong_nested_value_names_its_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "benchfarm.toml").write_text("[measurement]\nmin_samples = 1\n")
    with pytest.raises(SettingsError, match="measurement.min_samples.*benchfarm.toml"):
        load_settings()


@pytest.mark.parametrize("key", sorted(REMOVED_SETTINGS))
def test_a_removed_setting_is_named_with_what_replaces_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         key: str) -> None:
    """A file or environment of an earlier version that still sets a removed setting stops the command
    with the setting's name, where it came from, and why it is gone (not pydantic's "extra inputs")."""
    group, name = key.split(".")
    env = f"BENCHFARM_{group.upper()}__{name.upper()}"
    (tmp_path / "benchfarm.toml").write_text(f"[{group}]\n{name} = \"x\"\n")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert f"{key} (env {env}, or in benchfarm.toml): removed" in message and "Extra inputs" not in message
    assert REMOVED_SETTINGS[key] in message
    (tmp_path / "benchfarm.toml").unlink()
    monkeypatch.setenv(env, "x")
    with pytest.raises(SettingsError, match=re.escape(f"{key} (env {env}, or in the config file): removed")):
        load_settings()


def test_each_removed_setting_says_what_to_do() -> None:
    assert REMOVED_SETTINGS["measurement.max_rel_noise"].startswith("removed: it had no effect")
    assert "benchfarm pipeline --device-classes" in REMOVED_SETTINGS["buildkite.device_classes"]
    assert PIPELINE_ARGUMENTS["device_classes"] in REMOVED_SETTINGS["buildkite.device_classes"]
    assert PIPELINE_ARGUMENTS["cases"] in REMOVED_SETTINGS["buildkite.cases"]
    assert PIPELINE_ARGUMENTS["kind"] in REMOVED_SETTINGS["buildkite.run_kind"]
    assert "COMMENT_MAX_CHARS" in REMOVED_SETTINGS["github.comment_max_chars"]
    for key in REMOVED_SETTINGS:   # none of them is a setting again
        group, name = key.split(".")
        assert name not in Settings.model_fields[group].annotation.model_fields   # type: ignore[union-attr]


def test_a_removed_measurement_setting_in_a_device_override_is_named(tmp_path: Path) -> None:
    (tmp_path / "benchfarm.toml").write_text("[measurement.device_overrides.gpu]\nmax_rel_noise = 0.005\n")
    with pytest.raises(SettingsError, match=r"measurement\.device_overrides .*benchfarm\.toml.*"
                                            r"device_overrides\['gpu'\] sets max_rel_noise, removed: it had no effect"):
        load_settings()


def test_the_arguments_of_a_pipeline_upload_are_no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """BENCHFARM_PIPELINE_* are `benchfarm pipeline`'s flags' defaults: every command starts beside them
    (a Buildkite build's environment), and none of them is read as a setting."""
    for variable in PIPELINE_ARGUMENTS.values():
        monkeypatch.setenv(variable, "x")
    assert load_settings() == Settings()
    monkeypatch.setenv("BENCHFARM_PIPELINE_DEVICE_CLASS", "x")   # not one of them: unknown, as any typo
    with pytest.raises(SettingsError, match="unknown setting BENCHFARM_PIPELINE_DEVICE_CLASS"):
        load_settings()
