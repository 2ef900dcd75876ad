"""The socket and request state tables: well-formed, and the session's paths through them."""

from __future__ import annotations

import pytest

from realtime.protocol.states import (
    MACHINES,
    REQUEST,
    SOCKET,
    IllegalTransition,
    RequestEvent,
    RequestState,
    SocketEvent,
    SocketState,
)


@pytest.mark.parametrize("machine", MACHINES.values(), ids=list(MACHINES))
def test_every_state_is_reachable_and_every_non_final_state_can_end(machine):
    reachable = {machine.initial}
    changed = True
    while changed:
        changed = False
        for t in machine.transitions:
            if t.source in reachable and t.target not in reachable:
                reachable.add(t.target)
                changed = True
    assert reachable == set(machine.states)
    for state in machine.states:
        if state not in machine.final:
            assert any(t.source == state for t in machine.transitions), state
    for state in machine.final:
        assert not any(t.source == state for t in machine.transitions), state


def test_enums_cover_the_tables():
    assert set(SOCKET.states) == {s.value for s in SocketState}
    assert set(REQUEST.states) == {s.value for s in RequestState}
    assert {t.event for t in SOCKET.transitions} == {e.value for e in SocketEvent}
    assert {t.event for t in REQUEST.transitions} == {e.value for e in RequestEvent}


def test_a_request_path():
    state = REQUEST.initial
    for event in (RequestEvent.ACCEPT, RequestEvent.DISPATCH, RequestEvent.START,
                  RequestEvent.FINISH):  # fmt: skip
        state = REQUEST.next(state, event.value)
    assert state == RequestState.COMPLETED.value
    with pytest.raises(IllegalTransition):
        REQUEST.next(state, RequestEvent.CANCEL.value)


def test_every_socket_state_but_closed_survives_the_peer_leaving():
    for state in SOCKET.states:
        if state not in (SocketState.CLOSED.value, SocketState.CONNECTING.value):
            assert SOCKET.next(state, SocketEvent.PEER_GONE.value) == SocketState.CLOSED.value


def test_mermaid_lists_every_transition():
    text = SOCKET.mermaid()
    assert text.startswith("stateDiagram-v2")
    assert text.count("-->") == len(SOCKET.transitions) + 1 + len(SOCKET.final)


def test_setup_table_covers_its_enums_and_allows_setup_only_first():
    from realtime.protocol.states import SETUP, SetupEvent, SetupState

    assert set(SETUP.states) == {s.value for s in SetupState}
    assert {t.event for t in SETUP.transitions} == {e.value for e in SetupEvent}
    setups = {t.source for t in SETUP.transitions if t.event == SetupEvent.SETUP.value}
    assert setups == {SetupState.AWAITING_SETUP.value}
    for state in SETUP.states:
        if state not in SETUP.final:
            assert SETUP.next(state, SetupEvent.END.value) == SetupState.ENDED.value
