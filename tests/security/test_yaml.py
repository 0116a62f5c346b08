"""YAML from users (mig-parted configs, pasted into POST /api/v1/mig/validate/) is parsed with
the safe loader, within size limits, alias bombs refused quickly; and no code in the project
loads YAML with a loader that builds Python objects.

The parser's own limits are tested one by one in ``gpu_spec/tests/test_layout.py``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from gpu_spec.mig.config import MAX_CONFIG_BYTES
from tenants.services import api_token_create

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = (
    "portal", "tenants", "quotas", "approvals", "gpu_agent", "usage", "devcluster",
    "gpu_spec/src", "node_agent/src",
)  # fmt: skip
UNSAFE = re.compile(
    r"yaml\.(unsafe_load|full_load|unsafe_load_all|full_load_all)\b"
    r"|Loader\s*=\s*yaml\.(Loader|FullLoader|UnsafeLoader|CLoader|CFullLoader|CUnsafeLoader)\b"
)
BARE_LOAD = re.compile(r"yaml\.load(_all)?\((?![^)]*Loader=)")
BILLION_LAUGHS = "version: v1\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)

# Past Python's int-size limit (4300 digits) int() raises ValueError, which was a 500.
HUGE_INTEGER = (
    "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
    "      mig-devices:\n        1g.10gb: " + "9" * 5000 + "\n"
)


def test_no_code_loads_yaml_unsafely():
    files = [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 50
    for path in files:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        assert not UNSAFE.search(text), f"unsafe YAML loader in {where}"
        assert not BARE_LOAD.search(text), f"yaml.load without a (safe) Loader in {where}"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (BILLION_LAUGHS, "expands to more than"),
        ("!!python/object/apply:os.system ['touch /tmp/pwned']", "is not allowed"),
        ("version: v1\n" + "#" * MAX_CONFIG_BYTES, f"at most {MAX_CONFIG_BYTES}"),
        (HUGE_INTEGER, "a number 5000 characters long"),
        (HUGE_INTEGER.replace("1g.10gb: 9", "1g.10gb: 0x9"), "a number 5002 characters long"),
    ],
    ids=["alias-bomb", "python-tag", "oversized", "huge-integer", "huge-hex-integer"],
)
def test_a_hostile_pasted_config_is_a_quick_400_for_a_token_user(world, text, words):
    _, secret = api_token_create(user=world.alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    body = {"gpu_model": "NVIDIA A100-SXM4-80GB", "mig_parted_config": text, "config": "a"}
    started = time.perf_counter()
    response = client.post("/api/v1/mig/validate/", body, format="json")
    assert time.perf_counter() - started < 5
    assert response.status_code == 400
    messages = response.json()["fields"]["mig_parted_config"]
    assert any(words in m or "no more than" in m for m in messages), messages
