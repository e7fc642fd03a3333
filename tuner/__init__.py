"""tuner: find the best serving configuration of an LLM inference engine by measuring real servers."""

import logging

__version__ = "0.1.0"
__all__ = ["__version__"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
