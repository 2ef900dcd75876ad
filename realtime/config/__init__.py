"""Server settings (`settings.py`) and the `realtime serve` flags that set them (`flags.py`).

`flags.py` is imported only by what reads the command line or writes the docs:
it names every engine and parser, which the transports need not import.
"""

from realtime.config.settings import ServerConfig, constraint_limits, input_limits

__all__ = ["ServerConfig", "constraint_limits", "input_limits"]
