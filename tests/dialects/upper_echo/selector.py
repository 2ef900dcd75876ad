"""Upper echo's handshake selector: every handshake of its route speaks it."""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from typing import Any

from realtime.pipeline import ChatPipeline
from realtime.session.dialect import DialectChoice, DialectSelector
from tests.dialects.upper_echo.dialect import UpperEchoDialect


def upper_echo(pipeline: ChatPipeline) -> DialectSelector:
    """Upper echo on `pipeline`; claims every handshake."""
    dialect = functools.partial(UpperEchoDialect, pipeline)

    def select(scope: MutableMapping[str, Any]) -> DialectChoice:
        return DialectChoice(dialect)

    return select
