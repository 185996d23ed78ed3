"""Issue 29 item 8: the client's tokenizer is loaded the way aiperf loads it before aiperf starts
(one line naming what is missing and the flag that fixes it, not aiperf's traceback), and a
local tokenizer directory (``fleet-words`` included) works with ``HF_HUB_OFFLINE=1``, which
aiperf 0.13.0 alone refuses (it resolves the path as a hub id).  Real aiperf venv, no network:
offline mode keeps every lookup on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.bench import tokenizer
from launcher.bench.client import aiperf_path, client_env, run_level, tokenizer_path
from launcher.bench.results import level_from_aiperf
from launcher.errors import FleetError
from tests.fleetbench.test_measure import spec, standin
from tests.sandbox.test_standin import Proc, procs  # noqa: F401 - procs: fixture

pytestmark = pytest.mark.skipif(
    not Path(aiperf_path()).is_file(), reason=f"aiperf not installed at {aiperf_path()} (scripts/install.sh)"
)
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def test_a_tokenizer_that_cannot_load_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    env = {**client_env({}), **OFFLINE, "HF_HUB_CACHE": str(tmp_path / "empty")}
    with pytest.raises(FleetError) as err:
        tokenizer.check(aiperf_path(), "no-such-org/no-such-model", env, "no-such-org/no-such-model")
    assert str(err.value) == (
        "tokenizer no-such-org/no-such-model cannot be loaded (not in the HuggingFace cache and HF_HUB_OFFLINE is set); "
        "pass --tokenizer fleet-words (fleet's word-level one) or --tokenizer DIR (a local tokenizer directory)"
    )


def test_offline_a_local_directory_is_staged_as_a_cached_snapshot(tmp_path: Path) -> None:
    words = tokenizer_path("fleet-words")
    env = {**client_env({}), **OFFLINE}
    with pytest.raises(FleetError, match=r"^tokenizer fleet-words cannot be loaded \(Failed to load tokenizer '/.*/words': "
                                        r"HFValidationError: Repo id must be"):
        tokenizer.check(aiperf_path(), words, env, "fleet-words")  # what aiperf alone does offline
    name, staged = tokenizer.offline(words, env, tmp_path)
    assert name == "fleet-local/words" and staged["HF_HUB_CACHE"] == str(tmp_path / "hf-cache")
    tokenizer.check(aiperf_path(), name, staged, "fleet-words")  # loads
    assert tokenizer.offline(words, client_env({}), tmp_path) == (words, client_env({}))  # online: as given
    assert tokenizer.offline("org/model", env, tmp_path) == ("org/model", env)  # a hub id: as given


def test_a_level_runs_with_hf_hub_offline(procs: list[Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    url = standin(procs, FLEET_STANDIN_TOKEN_MS="2")
    lv = level_from_aiperf(run_level(spec(url, 4, 2, 4), tmp_path, {}), 2)
    assert (lv.completed, lv.failed) == (4, 0)
