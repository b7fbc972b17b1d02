"""Names as Pulsar checks them (issue 9, item 13): letters, digits, - _ = : . and at most 255 characters."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx import names
from streamtx.errors import MalformedError

BAD = ["", "a/b", "a b", "tab\t", "ctl\x01", "nul\x00", "pua\ue000", "caf\u00e9", "x" * 256, "a?b", "%2F"]
GOOD = ["a", "my-topic", "Topic_1", "a=b:c.d", "x" * 255, "-", "0"]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(MalformedError):
        names.check_name("topic", name)
    with pytest.raises(MalformedError):
        names.topic_name("t", "n", name)
    assert re.fullmatch(names.NAME_PATTERN, name) is None


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str) -> None:
    assert names.check_name("subscription", name) == name
    assert names.check_topic(f"persistent://t/{name}/x") == f"persistent://t/{name}/x"
    assert re.fullmatch(names.TOPIC_PATTERN, f"persistent://{name}/n/x")


def test_partition_names_and_new_topics() -> None:
    assert names.check_topic("persistent://t/n/x-partition-3") == "persistent://t/n/x-partition-3"
    with pytest.raises(MalformedError, match="-partition-"):
        names.check_new_topic("x-partition-3")
    for bad in ("t/n/x", "persistent://t/n", "persistent://t/n/x/y", "persistent://t//x"):
        with pytest.raises(MalformedError):
            names.check_topic(bad)


def test_messages_show_control_characters_escaped() -> None:
    with pytest.raises(MalformedError) as err:
        names.check_name("tenant", "a\x01\ue000")
    assert "\\x01" in err.value.message and "\\ue000" in err.value.message


@given(st.text(max_size=300))
def test_the_regex_and_the_pydantic_pattern_agree(name: str) -> None:
    try:
        names.check_name("topic", name)
        ok = True
    except MalformedError:
        ok = False
    assert ok == (re.fullmatch(names.NAME_PATTERN, name) is not None)
    assert ok == (all(c in "-_=:." or (c.isascii() and c.isalnum()) for c in name) and 0 < len(name) <= 255)
