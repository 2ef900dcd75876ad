"""Pure text and token logic: conversations, stops, output parsers, chunk builders.

Nothing in this package performs I/O or knows about a transport or an engine
(the model's tokenizer and template come from `realtime.model`); it is tested
without sockets or engines.
"""
