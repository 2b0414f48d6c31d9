"""The operator's limits: read from configuration, and refused when inconsistent."""

from __future__ import annotations

import pytest

from delayq.api.app import create_app
from delayq.validation import Limits


def test_limits_come_from_the_transport_options(make_conf):
    limits = Limits.from_conf(make_conf(max_message_delay=86400, default_claim_ttl=120))
    assert (limits.max_message_delay, limits.default_claim_ttl) == (86400, 120)
    assert limits.max_messages_per_claim_or_pop == 20


@pytest.mark.parametrize("default, limit", [
    ("default_message_ttl", "max_message_ttl"),
    ("default_message_delay", "max_message_delay"),
    ("default_claim_ttl", "max_claim_ttl"),
    ("default_claim_grace", "max_claim_grace"),
])
def test_a_default_beyond_its_limit_stops_the_app_naming_both(make_conf, default, limit):
    conf = make_conf(**{default: 600, limit: 300})
    with pytest.raises(ValueError, match=f"{default} = 600 is above {limit} = 300"):
        create_app(conf)
