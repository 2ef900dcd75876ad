"""A made-up fourth socket protocol, added as a real one is: this package, one line.

"Upper echo" answers each text frame upper-cased, on the served engine: it is what
`tests/dialects/test_adding_a_protocol.py` registers with `build_app(protocols=...)`
to show that a protocol needs nothing outside its own package but that line.

    job.py        its neutral request on the pipeline: the typed events out
    dialect.py    frames <-> the session core's commands; renders the typed events
    selector.py   claims every handshake of the route it is registered on
"""
