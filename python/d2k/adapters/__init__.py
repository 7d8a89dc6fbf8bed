"""Adapters from d2k to trainer ecosystems: :mod:`d2k.adapters.openenv` (OpenEnv HTTP/WebSocket
server, extra ``openenv``) and :mod:`d2k.adapters.verifiers` (a ``verifiers`` environment, extra
``verifiers``). Each imports its framework only when imported itself."""
