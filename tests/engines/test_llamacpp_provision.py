"""Provisioning errors are one line saying what to install; the cache is keyed by version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engines import llamacpp_provision as provision
from tuner.exceptions import ProvisionError


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path))
    monkeypatch.delenv("TUNER_LLAMA_SERVER", raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("missing", "words"), [("cmake", "cmake is not installed: install it"), ("c++", "no C++ compiler found: install one")]
)
def test_missing_tool_is_one_line(empty_cache: Path, monkeypatch: pytest.MonkeyPatch, missing: str, words: str) -> None:
    real_which = provision.shutil.which
    gone = {"cmake"} if missing == "cmake" else {"c++", "g++", "clang++"}
    monkeypatch.setattr(provision.shutil, "which", lambda name: None if name in gone else real_which(name))
    with pytest.raises(ProvisionError) as info:
        provision.server_binary()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_not_installed_without_install(empty_cache: Path) -> None:
    with pytest.raises(ProvisionError, match="run `tune engines install llamacpp`"):
        provision.server_binary(install=False)
    with pytest.raises(ProvisionError, match="run `tune engines install llamacpp`"):
        provision.model_file(install=False)


def test_cache_is_keyed_by_version(empty_cache: Path) -> None:
    target = empty_cache / "llamacpp" / provision.LLAMA_CPP_PYTHON_VERSION / "llama-server"
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    assert provision.server_binary(install=False) == target


def test_override_must_be_executable(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_LLAMA_SERVER", str(empty_cache / "nope"))
    with pytest.raises(ProvisionError, match="is not an executable file"):
        provision.server_binary()
