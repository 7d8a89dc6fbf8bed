"""The verifiers taskset id for d2k: ``vf eval d2k_verifiers ...`` (verifiers looks tasksets up by
top-level module name). The code is :mod:`d2k.adapters.verifiers`."""
from d2k.adapters.verifiers import D2KEnv, D2KTaskset

__all__ = ["D2KEnv", "D2KTaskset"]
