"""The tool-calling agent loop of the `agent_loop` scenario (issue 15, item 7).

script.py      the agent's turns: a task, then a tool call and its result per turn
transports.py  one turn over each API: chat completions resending the whole
               history, Responses over HTTP and over its WebSocket mode, both
               with `previous_response_id` and only the new items
"""
